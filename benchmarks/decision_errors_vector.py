"""Benchmark: the certification's error at its own levels, 100,000 seeded races per row (issue 86, item 4).

Rows at the levels a study's attempts spend (1.25% one-sided for the first, 0.625% for the second), caps of 128 to
1,024 items per task (rounds from 32 doubling), one and two tasks, 0/1 outcomes (10% flips) and F1-type fractional
ones (10% flips, every other item moving by sd 5 points, on a 0.05 grid), true drop = the budget (2 points). Each
row draws from its own seed; its "within" share gets a one-sided binomial p-value against the level
(:func:`poptune.evaluate.vectorsim.binomial_check`): a row whose p-value is under 0.001 FAILS its level. The races
are decided by :func:`poptune.evaluate.vectorsim.vector_races` (the score test at the budget, vectorised; the
futility stop off).

Usage::

    python benchmarks/decision_errors_vector.py [--races 100000] [--out section.md]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    from poptune.evaluate.vectorsim import GridScenario, standard_error, vector_races

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--races", type=int, default=100_000)
    parser.add_argument("--caps", default="128,256,512,1024")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    scenarios = (GridScenario.binary(0.02, 0.10), GridScenario.fractional(0.02, 0.10, 0.05))
    lines = ["| one-sided level | cap per task | tasks | outcome | seed | races | declared within (+-1 se) | "
             "declared beyond | mean items | binomial p (within > level) | check |", "|" + "---|" * 11]
    seed, started, failed = 86_000, time.time(), 0
    for level in (0.0125, 0.00625):
        for cap in (int(c) for c in args.caps.split(",")):
            for tasks in (1, 2):
                for scenario in scenarios:
                    seed += 1  # a seed of its own for every row
                    row = vector_races(scenario, cap=cap, tasks=tasks, alpha=level, races=args.races, seed=seed)
                    ok = row.p_value >= 0.001
                    failed += not ok
                    lines.append(f"| {100 * level:g}% | {cap:,} | {tasks} | {scenario.label} | {seed} | {row.races:,} "
                                 f"| {100 * row.within:.3f}% (+-{100 * standard_error(row.within, row.races):.3f}) | "
                                 f"{100 * row.beyond:.3f}% | {row.mean_items:.0f} | {row.p_value:.3g} | "
                                 f"{'ok' if ok else 'FAILS'} |")
                    print(lines[-1], file=sys.stderr, flush=True)
    lines.append("")
    lines.append(f"{failed} of {len(lines) - 3} rows fail their level; {time.time() - started:.0f} s")
    text = "\n".join(lines) + "\n"
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    print(text)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
