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
- **Caps a plan may choose** (issue 56): the error at the budget at caps off the doubling grid
  (:data:`poptune.evaluate.decisions.OFF_GRID_CAPS`, 10% and 4% flips and losses only), rounds from 32 per task.
- **A hopeless configuration** (true drop 75 points): the items a race spends before "beyond budget".
- **The futility stop** (``race(futility=True)``): verdicts and items with and without it.

Usage::

    python benchmarks/decision_errors.py [--replicates 2000] [--sections budget,caps,power,attempts,hopeless,futility]
        [--out leaderboards/decision-errors-<...>.md]
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
CAP_FLIPS = (("10% flips", 0.10, False), ("4% flips", 0.04, False), ("losses only", 0.02, True))
SECTIONS = ("budget", "caps", "power", "attempts", "hopeless", "futility", "plan")


def _caps(replicates: int) -> list[str]:
    """The error at the budget at caps a plan may choose off the doubling grid (issue 56)."""
    from poptune.evaluate.decisions import OFF_GRID_CAPS, Scenario, race_error
    from poptune.evaluate.workload import rounds

    lines = ["", "## Caps a plan may choose: error at the budget (2 points) off the doubling grid", "",
             "Rounds from 32 items per task doubling to the cap (the last round ends at the cap), two tasks, "
             "confidence 95%; each share must be at most 2.5%.", "",
             "| cap per task | rounds (items per task) | flips | declared within | declared beyond | undecided | "
             "mean items |", "|---|---|---|---|---|---|---|"]
    for cap in OFF_GRID_CAPS:
        for label, flips, losses_only in CAP_FLIPS:
            rates = race_error(Scenario(0.02, flips, losses_only), start=32, cap=cap, replicates=replicates,
                               seed=cap)
            lines.append(f"| {cap:,} | {', '.join(map(str, rounds(32, cap)))} | {label} | {100 * rates.within:.2f}% | "
                         f"{100 * rates.beyond:.2f}% | {100 * rates.undecided:.1f}% | {rates.mean_items:.0f} |")
    return lines


def _hopeless(replicates: int) -> list[str]:
    """The items a race spends rejecting a configuration that loses 75 points."""
    from poptune.evaluate.decisions import Scenario, race_error

    lines = ["", "## A hopeless configuration: true drop 75 points, rejected (\"beyond budget\")", "",
             "Two tasks; \"beyond\" spends its error by Hwang-Shih-DeCani (gamma -2), so the first look can reject "
             "(under O'Brien-Fleming spending on both sides the search's race spent 32 items, its second look).", "",
             "| design | flips | declared beyond | items at the first look | mean items |", "|---|---|---|---|---|"]
    for name, start, cap in (("search: 8 -> 32 per task", 8, 32), ("certification: 32 -> 128 per task", 32, 128)):
        for label, scenario in (("losses only", Scenario(0.75, 0.75, losses_only=True)),
                                ("85% flips", Scenario(0.75, 0.85))):
            rates = race_error(scenario, start=start, cap=cap, replicates=replicates, seed=13)
            lines.append(f"| {name} | {label} | {100 * rates.beyond:.1f}% | {2 * start} | {rates.mean_items:.1f} |")
    return lines


def _futility(replicates: int) -> list[str]:
    """Verdicts and items with the opt-in futility stop and without it, on the same draws."""
    from poptune.evaluate.decisions import Scenario, race_error

    lines = ["", "## The futility stop (`race(futility=True)`): the same races with and without it", "",
             "Rounds from 32 items per task, two tasks, budget 2 points; the stop is non-binding (the boundaries do "
             "not count on it), so it can only lower either verdict's error.", "",
             "| true drop | flips | cap per task | futility | within | beyond | futile | undecided | mean items |",
             "|---|---|---|---|---|---|---|---|---|"]
    for drop, flips, cap in ((0.0, 0.10, 1250), (0.0, 0.05, 512), (0.0, 0.10, 128), (0.01, 0.10, 1250),
                             (0.02, 0.10, 1250), (0.03, 0.10, 1250), (0.04, 0.10, 1250), (0.04, 0.20, 128)):
        for futility in (False, True):
            rates = race_error(Scenario(drop, flips), start=32, cap=cap, replicates=replicates, seed=17,
                               futility=futility)
            lines.append(f"| {100 * drop:g} | {100 * flips:g}% | {cap:,} | {'on' if futility else 'off'} | "
                         f"{100 * rates.within:.1f}% | {100 * rates.beyond:.1f}% | {100 * rates.futile:.1f}% | "
                         f"{100 * rates.undecided:.1f}% | {rates.mean_items:.0f} |")
    return lines


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


def _plan(replicates: int, errors: int) -> list[str]:
    """The study's planned first certification: its cap sized from the candidate's search items (2 x 32, their
    flips drawn at the true rate), at most 1,024 per task, spending 1.25% (:func:`poptune.tune.certify.plan_certification`
    without a clock), with the futility stop on; true drop 0 (power) and at the budget (error)."""
    import numpy as np

    from poptune.evaluate.decisions import Scenario, race_error
    from poptune.evaluate.paired import SEQUENTIAL, PairedDrop
    from poptune.evaluate.racing import verdict_cost

    lines = ["", "## The study's plan: the certification sized from the search's flips (attempt 1, 1.25%)", "",
             "Each replicate draws the candidate's 64 search items (2 tasks x 32) at the true flip rate, sizes the cap "
             "as the study does (the items a 2-point verdict needs at 80% power at the flips seen, one added; at "
             "most 1,024 per task, at least 32), then races fresh items from 32 per task, futility stop on.", "",
             "| true drop | flips | replicates | mean planned cap per task | certified within | certified beyond | "
             "futile | undecided | mean fresh items |", "|---|---|---|---|---|---|---|---|---|"]
    for drop, flips, count in ((0.0, 0.037, replicates), (0.0, 0.10, replicates), (0.02, 0.037, errors),
                               (0.02, 0.10, errors)):
        rng = np.random.default_rng(11)
        scenario = Scenario(drop, flips)
        tally = {"within": 0, "beyond": 0, "futile": 0, "undecided": 0}
        caps, items = [], 0
        for k in range(count):
            flipped = {t: int(sum(a != b for a, b in zip(*scenario.draw(rng, 32)))) for t in "ab"}
            seen = PairedDrop(0.0, 0.0, 0.0, {"a": 32, "b": 32}, flipped, SEQUENTIAL)
            cap = max(32, min(1024, verdict_cost(seen, 2.0, planned=1024, start=32, confidence=0.975).per_task))
            rates = race_error(scenario, start=32, cap=cap, confidence=0.975, replicates=1, seed=1000 + k,
                               futility=True)
            for name in tally:
                tally[name] += getattr(rates, name)
            caps.append(cap)
            items += rates.mean_items
        lines.append(f"| {100 * drop:g} | {100 * flips:g}% | {count} | {sum(caps) / len(caps):.0f} | "
                     f"{100 * tally['within'] / count:.1f}% | {100 * tally['beyond'] / count:.1f}% | "
                     f"{100 * tally['futile'] / count:.1f}% | {100 * tally['undecided'] / count:.1f}% | "
                     f"{items / count:.0f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    from poptune.evaluate.decisions import Scenario, race_error
    import numpy
    import scipy

    from poptune.measure.provenance import git_commit

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=2000)
    parser.add_argument("--power-replicates", type=int, default=400)
    parser.add_argument("--sections", default=",".join(SECTIONS),
                        help=f"comma-separated, of {', '.join(SECTIONS)} (default: all)")
    parser.add_argument("--out", default=str(ROOT / "leaderboards"
                                             / "decision-errors-simulated-cpu-intel-xeon-processor-2t.md"))
    args = parser.parse_args(argv)
    sections = [x.strip() for x in args.sections.split(",") if x.strip()]
    if any(x not in SECTIONS for x in sections):
        parser.error(f"--sections: each of {', '.join(SECTIONS)}")
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
             f"- sections: {', '.join(sections)}"]
    if "budget" in sections:
        lines += ["", "## Error when the true drop equals the budget (2 points): must be at most 2.5%", "",
                  "| design | flips | declared within | declared beyond | undecided | mean items |",
                  "|---|---|---|---|---|---|"]
    for name, start, cap, confidence in DESIGNS if "budget" in sections else ():
        for label, flips, losses_only, partial in AT_BUDGET:
            rates = race_error(Scenario(0.02, flips, losses_only, partial), start=start, cap=cap,
                               confidence=confidence, replicates=args.replicates, seed=7)
            lines.append(f"| {name} | {label} | {100 * rates.within:.2f}% | {100 * rates.beyond:.2f}% | "
                         f"{100 * rates.undecided:.1f}% | {rates.mean_items:.0f} |")
    if "caps" in sections:
        lines += _caps(args.replicates)
    if "power" in sections:
        lines += ["", "## Power: a configuration with no true drop certified within 2 points", "",
                  "Certification of one candidate (confidence 95%), rounds from 32 items per task (16 on the "
                  "long-prompt pack) doubling to the cap; two tasks. A one-look test needs about 1,960 items for 80% "
                  "at 10% flips.", "", "| cap per task | flips | certified within | mean fresh items |",
                  "|---|---|---|---|"]
    for preset, cap in POWER_CAPS if "power" in sections else ():
        for flips in POWER_FLIPS:
            rates = race_error(Scenario(0.0, flips), start=min(32, cap), cap=cap, confidence=0.95,
                               replicates=args.power_replicates, seed=11)
            lines.append(f"| {preset} ({cap}) | {100 * flips:g}% | {100 * rates.within:.1f}% | "
                         f"{rates.mean_items:.0f} |")
    if "attempts" in sections:
        lines += _attempts(args.power_replicates)
    if "plan" in sections:
        lines += _plan(args.power_replicates, args.replicates)
    if "hopeless" in sections:
        lines += _hopeless(args.power_replicates)
    if "futility" in sections:
        lines += _futility(args.power_replicates)
    lines += ["", f"Wall time: {time.monotonic() - started:.0f} s on this project's 2-core CPU."]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
