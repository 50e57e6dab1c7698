"""Benchmark: how often the study's accuracy verdicts are wrong, and how often they decide, by seeded simulation.

Drives the real racing (:func:`poptune.evaluate.racing.race`, through :func:`poptune.evaluate.decisions.race_error`)
with simulated paired outcomes of known true drop and flip rate, two tasks, and counts the verdicts:

- **Error at the budget** (true drop = 2 points, the budget): the share declared "within budget" (must be at
  most 2.5%) and "beyond budget" (likewise), for 5%, 10% and 20% flips, losses only, and F1-type items, under
  the standard search (8 -> 32 items per task), the long-prompt certification (16), the standard certification
  (32 -> 128), the thorough one (32 -> 512) and a certification of two candidates (confidence 97.5%).
- **Power** (true drop 0): how often a configuration is certified within 2 points at each preset's
  certification cap (long-prompt 16, quick 64, standard 128, thorough 512 items per task) and at 1,250 per task
  (2,500 in all), for 0%, 5%, 10% and 20% flips, with the mean items a race spends.
- **The study's attempts** (true drop 0): a study's k-th certification spends 2.5% / 2^k, so its first attempt
  runs at 1.25% and the printed `--certify N` follow-up at 0.625%: the power of the first at the standard cap and
  of the second at the size the cost line prints (:func:`poptune.evaluate.racing.verdict_cost`).

Usage::

    python benchmarks/decision_errors.py [--replicates 2000] [--out leaderboards/decision-errors-<...>.md]
"""

from __future__ import annotations

import argparse
import datetime as dt
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

AT_BUDGET = (("5% flips", 0.05, False, False), ("10% flips", 0.10, False, False),
             ("20% flips", 0.20, False, False), ("losses only", 0.02, True, False),
             ("10% flips, F1-type", 0.10, False, True), ("losses only, F1-type", 0.02 / 0.6, True, True))
DESIGNS = (("standard search: 8 -> 32 per task", 8, 32, 0.95),
           ("long-prompt certification: 16 per task", 16, 16, 0.95),
           ("standard certification: 32 -> 128 per task, 1 candidate", 32, 128, 0.95),
           ("thorough certification: 32 -> 512 per task", 32, 512, 0.95),
           ("certification of 2 candidates: 32 -> 128 per task", 32, 128, 0.975))
POWER_CAPS = (("long-prompt", 16), ("quick", 64), ("standard", 128), ("thorough", 512), ("2,500 in all", 1250))
POWER_FLIPS = (0.0, 0.05, 0.10, 0.20)


def _attempts(replicates: int) -> list[str]:
    """The study's first certification (1.25%, standard cap) and the printed follow-up (0.625%, at its size)."""
    from poptune.evaluate.decisions import Scenario, race_error
    from poptune.evaluate.paired import SEQUENTIAL, PairedDrop
    from poptune.evaluate.racing import verdict_cost

    lines = ["", "## The study's attempts: the error shared (1.25%, then 0.625%), one candidate, true drop 0", "",
             "| flips | attempt 1 at 32 -> 128 per task: certified within (at 2.5% it would be) | the follow-up's size "
             "per task (cost line) | attempt 2 at that size: certified within |", "|---|---|---|---|"]
    for flips in (0.037, 0.10):
        first = race_error(Scenario(0.0, flips), start=32, cap=128, confidence=0.975, replicates=replicates, seed=5)
        alone = race_error(Scenario(0.0, flips), start=32, cap=128, confidence=0.95, replicates=replicates, seed=5)
        seen = PairedDrop(0.0, -3.0, 3.0, {"a": 200, "b": 200}, {t: round(200 * flips) for t in "ab"}, SEQUENTIAL)
        cost = verdict_cost(seen, 2.0, planned=128, start=32, confidence=0.9875)
        second = race_error(Scenario(0.0, flips), start=32, cap=cost.per_task, confidence=0.9875,
                            replicates=replicates, seed=6)
        lines.append(f"| {100 * flips:g}% | {100 * first.within:.1f}% ({100 * alone.within:.1f}%) | {cost.per_task:,} "
                     f"| {100 * second.within:.1f}% |")
    return lines


def main(argv: list[str] | None = None) -> int:
    from poptune.evaluate.decisions import Scenario, race_error
    import numpy
    import scipy

    from poptune.measure.provenance import git_commit

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=2000)
    parser.add_argument("--power-replicates", type=int, default=400)
    parser.add_argument("--out", default=str(ROOT / "leaderboards"
                                             / "decision-errors-simulated-cpu-intel-xeon-processor-2t.md"))
    args = parser.parse_args(argv)
    started = time.monotonic()
    lines = ["# Decision errors of the accuracy verdicts (seeded simulation)", "",
             f"- command: `python {shlex.join(['benchmarks/decision_errors.py', *(argv or sys.argv[1:])])}`",
             f"- commit: {git_commit(ROOT)}; numpy {numpy.__version__}, scipy {scipy.__version__}; "
             f"date: {dt.date.today().isoformat()}",
             "- what: the real `race()` on simulated paired outcomes of two tasks (0/1, or F1-type scores in [0, 1]), "
             "true drop and flip rate known; interval: the score test over the race's planned group-sequential "
             "design (docs/statistics.md); budget 2 points",
             f"- replicates: {args.replicates} per row at the budget (standard error of a 2.5% share: "
             f"{100 * (0.025 * 0.975 / args.replicates) ** 0.5:.2f} points), {args.power_replicates} per power row",
             "", "## Error when the true drop equals the budget (2 points): must be at most 2.5%", "",
             "| design | flips | declared within | declared beyond | undecided | mean items |",
             "|---|---|---|---|---|---|"]
    for name, start, cap, confidence in DESIGNS:
        for label, flips, losses_only, partial in AT_BUDGET:
            rates = race_error(Scenario(0.02, flips, losses_only, partial), start=start, cap=cap,
                               confidence=confidence, replicates=args.replicates, seed=7)
            lines.append(f"| {name} | {label} | {100 * rates.within:.2f}% | {100 * rates.beyond:.2f}% | "
                         f"{100 * rates.undecided:.1f}% | {rates.mean_items:.0f} |")
    lines += ["", "## Power: a configuration with no true drop certified within 2 points", "",
              "Certification of one candidate (confidence 95%), rounds from 32 items per task (16 on the long-prompt "
              "pack) doubling to the cap; two tasks. A one-look test needs about 1,960 items for 80% at 10% flips.",
              "", "| cap per task | flips | certified within | mean fresh items |", "|---|---|---|---|"]
    for preset, cap in POWER_CAPS:
        for flips in POWER_FLIPS:
            rates = race_error(Scenario(0.0, flips), start=min(32, cap), cap=cap, confidence=0.95,
                               replicates=args.power_replicates, seed=11)
            lines.append(f"| {preset} ({cap}) | {100 * flips:g}% | {100 * rates.within:.1f}% | "
                         f"{rates.mean_items:.0f} |")
    lines += _attempts(args.power_replicates)
    lines += ["", f"Wall time: {time.monotonic() - started:.0f} s on this project's 2-core CPU."]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
