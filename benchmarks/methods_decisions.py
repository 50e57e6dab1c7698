"""Benchmark: the methods board's error and power by seeded simulation, at the sizes of the committed tables.

Drives the board's own interval and verdict (:func:`poptune.comparison.board.lead_of`,
:func:`~poptune.comparison.board.verdict_of`) through :mod:`poptune.comparison.board_decisions`:

- **error**: tables of R rows with no true lead, the share with any verdict (Bonferroni: at most 5%);
- **power**: one row with a true lead of POP, at the per-row confidence of its table, the share decided
  the right way and the wrong way.

The multiple-choice table is 0/1 items (3 tasks x 128), the long-prompt table F1-type items (2 tasks x 96, a
flip moves an item's F1 by a uniform share in [0.2, 1]), with 9 and 5 baseline rows.

Usage::

    python benchmarks/methods_decisions.py [--replicates 400] [--out leaderboards/methods-decisions-simulated-<...>.md]
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

from poptune.measure.provenance import typed_command

ROOT = Path(__file__).resolve().parents[1]

#: (table, baseline rows, tasks, items per task, F1-type, flip rate, leads in points): the committed tables.
TABLES = (("multiple-choice", 9, 3, 128, False, 0.4, (5, 10, 15, 20)),
          ("long-prompts", 5, 2, 96, True, 0.8, (5, 10, 20, 30)))
NULL_FLIPS = {False: (0.2, 0.4), True: (0.5, 0.8)}


def _share(rates, share: float) -> str:
    return f"{100 * share:.1f}% (+-{100 * rates.standard_error(share):.1f})"


def _rows(args: argparse.Namespace) -> list[str]:
    from poptune.comparison.board_decisions import row_power, table_error
    from poptune.evaluate.decisions import Scenario

    lines = []
    for name, rows, tasks, per_task, partial, flips, leads in TABLES:
        kind = "F1-type" if partial else "0/1"
        for flip in NULL_FLIPS[partial]:
            r = table_error(Scenario(0.0, flip, partial=partial), rows=rows, tasks=tasks, per_task=per_task,
                            replicates=args.replicates // 2, seed=args.seed)
            lines.append(f"| {name} | {tasks} x {per_task} {kind} | no lead in any of {rows} rows, "
                         f"{100 * flip:g}% flips | - | {_share(r, r.wrong)} (any verdict in the table) | "
                         f"{r.replicates} |")
            print(lines[-1], flush=True)
        for lead in leads:
            r = row_power(Scenario(lead / 100, flips, partial=partial), rows=rows, tasks=tasks,
                          per_task=per_task, replicates=args.replicates, seed=args.seed)
            lines.append(f"| {name} | {tasks} x {per_task} {kind} | one row: POP +{lead} points, {100 * flips:g}% "
                         f"flips | {_share(r, r.right)} | {_share(r, r.wrong)} | {r.replicates} |")
            print(lines[-1], flush=True)
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicates", type=int, default=400, help="tables per power row (error rows: half)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="the Markdown file to write")
    args = parser.parse_args(argv)
    if args.replicates < 2:
        parser.error("--replicates must be >= 2")
    sys.path.insert(0, str(ROOT))
    from poptune.measure.hardware import fingerprint

    started = time.monotonic()
    rows = _rows(args)
    seconds = time.monotonic() - started
    hardware = fingerprint("cpu").hardware_id
    text = "\n".join([
        f"# Methods board verdicts, simulated ({hardware})", "",
        f"- command: `{typed_command(['benchmarks/methods_decisions.py', *sys.argv[1:]], program=None)}`".rstrip(),
        f"- date: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC; wall time {seconds:.0f} s on {hardware}",
        "- what: the board's own interval (score test, POP - baseline at 1 - 0.05/R per row) and verdict on seeded "
        "simulated paired outcomes (poptune/comparison/board_decisions.py); a table with no true lead errs when any of "
        "its rows gets a verdict (at most 5% by Bonferroni); a row with a true lead is decided the true way with the "
        "power shown", "",
        "| table | items | truth | decided the true way (power) | decided the wrong way | tables |",
        "|---|---|---|---|---|---|",
        *rows, ""])
    if args.out:
        args.out.write_text(text)
        print(f"wrote {args.out}")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
