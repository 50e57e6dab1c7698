"""``poptune pareto``: print a stored study's search front with the reference rows, its certified rows and verdict."""

from __future__ import annotations

import argparse
import json
from typing import Any

from poptune.cli._args import add_output, add_storage, check_output_path, emit


def register(sub: Any) -> None:
    parser = sub.add_parser("pareto", help="print a stored Pareto front")
    add_storage(parser)
    add_output(parser, "the front and the reference rows")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from poptune import store
    from poptune.reports import study_report as report

    if args.out:
        check_output_path(args.out)
    built = report.StudyReport.of(store.read_study(args.storage, args.study))
    rows, refs, certified = built.front, built.references, built.certified
    data = json.dumps({"study": built.name, "front": [r.to_dict() for r in rows],
                       "references": [{"name": r.name, "status": r.status, "row": r.row.to_dict() if r.row else None}
                                      for r in refs],
                       "certified": [r.to_dict() for r in certified], "verdict": built.verdict_line()}, indent=2)
    budget = built.budget
    table = (f"study {built.name}: search front"
             + (f" (rows not rejected by the budget of {budget:g} points; not a verdict)" if budget is not None else "")
             + "\n" + report.front_table(rows, refs, reference_ms=built.reference_ms,
                                         accuracy=built.accuracy_column(), objectives=built.stored.objectives))
    table += "".join(f"\n{line}" for line in built.prompts_lines())
    if certified:
        table += "\ncertified on fresh items:\n" + report.verdict_table(
            certified, reference_ms=built.reference_ms, accuracy=built.accuracy_column(certified=True),
            objectives=built.stored.objectives, confidence=(built.stored.certification or {}).get("confidence"))
    table += "\n" + built.verdict_line()
    emit(args, table, data)
    return 0
