"""``poptune tuners``: how fast each sampler finds good configurations, on the replay of a measured grid.

A grid file (``--grid``, written by ``poptune grid``; no database, no model) or a stored grid study
(``--storage``; ``--build`` first measures one for real) answers each sampler's configurations, per seed; the
table (:mod:`poptune.reports.tunertable`) scores them by the recorded figures. A missing or malformed grid file, or one
that does not cover the search space, is one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
from typing import Any

from poptune.cli._args import comma_list, default_of, items
from poptune.cli._checks import finite, int_list, positive
from poptune.reports.tunertable import TunerSpec


def register(sub: Any) -> None:
    parser = sub.add_parser("tuners", help="compare the samplers on the replay of a measured grid (docs/grid.md)")
    # --grid or --storage, not both: the spec's check (TunerSpec), not the parser's
    parser.add_argument("--grid", help="a grid file (CSV) to replay: no database needed")
    parser.add_argument("--storage", help="a stored grid study (default route: sqlite:///studies/grid.db)")
    parser.add_argument("--build", action="store_true", help="first run the grid study for real into --storage")
    model, tasks, limit, lengths = (default_of(TunerSpec, name) for name in ("model", "tasks", "limit", "lengths"))
    parser.add_argument("--model", default=model, help=f"the model of --build (default: {model})")
    parser.add_argument("--tasks", type=comma_list, default=tasks,
                        help=f"the tasks of --build (default: {','.join(tasks)})")
    parser.add_argument("--limit", type=positive, default=limit, help=f"items per task of --build (default: {limit})")
    parser.add_argument("--lengths", type=comma_list, default=tuple(map(str, lengths)),
                        help=f"prompt lengths of --build (default: {','.join(map(str, lengths))})")
    parser.add_argument("--max-drop", type=_points, help="accuracy budget in points >= 0 (default: the grid's; "
                        "1.0 for a storage)")
    parser.add_argument("--samplers", type=comma_list,
                        help="comma-separated (default: all six for --grid, tpe,nsga2,random else)")
    parser.add_argument("--seeds", type=positive, help="seeds per sampler (default: 20 for --grid, 10 else)")
    parser.add_argument("--noise", action="store_true", help="answers drawn from the recorded intervals (seeded)")
    parser.add_argument("--horizon", type=positive, help="trials within which 95%% of the grid's hypervolume is "
                        "sought (default: 64 for --grid, 32 else)")
    parser.add_argument("--out", help="the Markdown file to write "
                        "(default: leaderboards/tuner-replay-<model>-<hardware>.md)")
    parser.set_defaults(run=run)


def _points(text: str) -> float:
    """An argparse type: an accuracy budget, finite points >= 0 (a negative one would admit nothing)."""
    value = finite(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected accuracy points >= 0, got {text!r}")
    return value


def run(args: argparse.Namespace) -> int:
    from poptune.measure.provenance import typed_command
    from poptune.reports.tunertable import summary_line, tuner_table

    spec = TunerSpec(grid=args.grid, storage=args.storage, build=args.build, model=args.model,
                     tasks=items(args.tasks), limit=args.limit,
                     lengths=tuple(int_list(args.lengths, "--lengths")), max_drop=args.max_drop,
                     samplers=items(args.samplers) or None,
                     seeds=args.seeds, noise=args.noise, horizon=args.horizon, out=args.out)
    out, rows = tuner_table(spec, typed_command(args.argv))
    for row in rows:
        print(summary_line(row), flush=True)
    print(f"wrote {out}")
    return 0
