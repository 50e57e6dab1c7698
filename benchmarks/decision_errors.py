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
- Issue 58: **levels** (the error at 1.25% and 0.625%, the levels a study's attempts spend), **studypower** (power
  at 1.25%), **followup** (the two-attempt path, attempt 2 on new items against the former re-race of the same
  items, :func:`poptune.tune.simulate.follow_up`), **unequal** (tasks of unequal sizes, flip rates and drops,
  :func:`poptune.tune.simulate.race_tasks`), **promise** (the cost line's size at a true drop of half the budget).
- **A continuous outcome** (``continuous``: a likelihood judge's, F1-type scores): the empirical likelihood's
  variance (:func:`poptune.evaluate.paired.el_moments`), its error at the budget when every item moves a little,
  with flips or rare large losses beside, its power at true drop 0 and the plan's size before and after.
- **What a time budget buys** (``bought``, issue 56): the first certification's power and error at the caps a
  study's clock affords rather than the ones its plan asks for.
- **One task, a continuous outcome** (``onetask``, issue 56): a long-prompt likelihood study's certification (one
  task, 1.25%, futility on) at the caps its clock bought (232, 256), its plan asked (388) and the preset's most.
- **The plan's chance against the race's power** (``calibration``, issue 56): what a plan line says a cap is worth
  (:attr:`poptune.evaluate.racing.VerdictCost.chance`) beside the seeded races' power at that cap, for 0/1 and
  continuous outcomes, one task and two.

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
SECTIONS = ("budget", "caps", "power", "attempts", "hopeless", "futility", "plan", "levels", "studypower", "followup",
            "unequal", "promise", "continuous", "bought", "onetask", "calibration")
#: Caps per task a study's clock bought or would need (issue 56): the 2026-12-06 default run on the Xeon bought 372
#: (its cost line asked 644 for 80% at the search's 4.5% flips); 256 and 512 around them.
BOUGHT_CAPS = (256, 372, 512, 644)
BOUGHT_FLIPS = (0.023, 0.045)
CONTINUOUS_AT_BUDGET = (("every item moves, sd 5 points, all carry the drop", 0.0, False, 0.05),
                        ("every item moves, sd 2 points, all carry the drop", 0.0, False, 0.02),
                        ("10% F1-type flips, the others move by sd 5 points", 0.10, False, 0.05),
                        ("losses only, F1-type, the others move by sd 3 points", 0.02 / 0.6, True, 0.03),
                        ("losses only, F1-type, the others move by sd 1 point", 0.02 / 0.6, True, 0.01),
                        ("10% F1-type flips, no other move", 0.10, False, 0.0),
                        ("losses only, F1-type, no other move", 0.02 / 0.6, True, 0.0))
CONTINUOUS_DESIGNS = (("32 -> 128 per task", 128), ("32 -> 512 per task", 512))
#: One task's caps a long-prompt likelihood study's clock bought or its plan asked (issue 56, 2026-12-06, this Xeon:
#: 232 and 256 bought at the default budget, 388 planned for 80% power at --time-budget 30) and the preset's most.
ONE_TASK_CAPS = (232, 256, 388, 512)
#: The root mean square move of the long pack's likelihood outcome the search saw (the plan line of those runs).
ONE_TASK_MOVE = 0.049


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


def _continuous(replicates: int, power_replicates: int) -> list[str]:
    """A continuous outcome (a likelihood judge's; F1-type scores): the empirical likelihood's variance
    (:func:`poptune.evaluate.paired.el_moments`), its error at the budget, its power and the plan's promise."""
    from poptune.evaluate.decisions import Scenario, race_error
    from poptune.evaluate.paired import PairedDrop, paired_drop
    from poptune.evaluate.racing import verdict_cost

    lines = ["", "## A continuous outcome: error at the budget (2 points), power and the plan's size", "",
             "F1-type scores in [0, 1] (`Scenario(partial=True, noise=sd)`: flips move a score by a share of it, "
             "every other item moves by a normal amount of that sd, clipped at 3 sd; with no flip every item "
             "carries the drop). The score test's variance is the empirical likelihood's over the moves and the "
             "scale's ends. Rounds from 32 items per task, two tasks, confidence 95%; each share must be at most "
             "2.5%.", "", "| design | outcome | declared within | declared beyond | undecided | mean items |",
             "|---|---|---|---|---|---|"]
    for name, cap in CONTINUOUS_DESIGNS:
        for label, flips, losses_only, noise in CONTINUOUS_AT_BUDGET:
            rates = race_error(Scenario(0.02, flips, losses_only, True, noise), start=32, cap=cap,
                               replicates=replicates, seed=19)
            lines.append(f"| {name} | {label} | {100 * rates.within:.2f}% | {100 * rates.beyond:.2f}% | "
                         f"{100 * rates.undecided:.1f}% | {rates.mean_items:.0f} |")
    lines += ["", "True drop 0, every item moving by a normal amount (no flip): how often a race to the cap certifies "
              "within 2 points, and the plan's size: the items per task `verdict_cost` sizes for 80% from 200 items "
              "per task of the same outcome (after: on the squared moves; before: on the absolute ones, as the "
              "counts' fit planned), and a race to the size after.", "",
              "| move sd | within at 128 per task | at 256 | planned per task, before | after | within at the size "
              "after | mean items |", "|---|---|---|---|---|---|---|"]
    import numpy as np

    for noise in (0.05, 0.02, 0.10):
        scenario = Scenario(0.0, 0.0, partial=True, noise=noise)
        shares = [race_error(scenario, start=32, cap=cap, replicates=power_replicates, seed=23).within
                  for cap in (128, 256)]
        draws = [scenario.draw(np.random.default_rng(29 + k), 200) for k in range(2)]
        seen = paired_drop({t: d[0] for t, d in zip("ab", draws)}, {t: d[1] for t, d in zip("ab", draws)})
        before = {k: v for k, v in seen.to_dict().items() if k != "squares"}
        size = verdict_cost(seen, 2.0, planned=128, start=32).per_task
        old = verdict_cost(PairedDrop.from_dict(before), 2.0, planned=128, start=32).per_task
        at = race_error(scenario, start=32, cap=size, replicates=power_replicates, seed=31)
        lines.append(f"| {100 * noise:g} points | {100 * shares[0]:.1f}% | {100 * shares[1]:.1f}% | {old:,} | "
                     f"{size:,} | {100 * at.within:.1f}% | {at.mean_items:.0f} |")
    return lines


def _one_task(replicates: int, power_replicates: int) -> list[str]:
    """Issue 56: a long-prompt likelihood study's certification: one task, a continuous outcome, the study's first
    attempt (1.25% one-sided, futility stop on) at the caps its clock bought or its plan asked."""
    from poptune.evaluate.decisions import Scenario, race_error
    from poptune.evaluate.workload import rounds

    sd = ONE_TASK_MOVE
    outcomes = ((f"every item moves, sd {100 * sd:g} points, all carry the drop", 0.0, False, sd),
                ("10% F1-type flips, the others move by sd 5 points", 0.10, False, 0.05),
                ("losses only, F1-type, the others move by sd 3 points", 0.02 / 0.6, True, 0.03))
    lines = ["", "## One task, a continuous outcome, at the caps a long-prompt likelihood study buys (issue 56)", "",
             "The certification of `poptune study --model gemma-3 --data-dir ../shared/data --judge likelihood`: one "
             "task (`longctx_squad:likelihood`), the study's first attempt (confidence 97.5%, one-sided 1.25%), "
             "futility stop on, rounds from 32 items doubling to the cap (the last look at the cap: 232 and 388 are "
             "off the doubling grid), F1-type scores moving as `Scenario(partial=True, noise=sd)`. Caps: what the "
             "clock bought in the runs of `study-long-likelihood-*` (232, 256), what the plan asked for 80% power "
             "(388) and the preset's most (512). Error: true drop = budget (2 points), each share must be at most "
             "1.25%; the races neither declared nor undecided stopped futile.", "",
             "| cap | rounds | outcome | declared within | declared beyond | undecided | mean items |",
             "|---|---|---|---|---|---|---|"]
    for cap in ONE_TASK_CAPS:
        for label, flips, losses_only, noise in outcomes:
            rates = race_error(Scenario(0.02, flips, losses_only, True, noise), start=32, cap=cap, tasks=1,
                               confidence=0.975, replicates=replicates, seed=cap + 56, futility=True)
            lines.append(f"| {cap} | {', '.join(map(str, rounds(32, cap)))} | {label} | {100 * rates.within:.2f}% | "
                         f"{100 * rates.beyond:.2f}% | {100 * rates.undecided:.1f}% | {rates.mean_items:.0f} |")
    lines += ["", f"Power: true drop 0, every item moving by a normal amount (sd {100 * sd:g} points, as the runs' "
              "searches saw, and 3 and 8 points around it), the same design.", "",
              "| move sd | cap | certified within | futile | undecided | mean items |", "|---|---|---|---|---|---|"]
    for noise in (0.03, sd, 0.08):
        for cap in ONE_TASK_CAPS:
            rates = race_error(Scenario(0.0, 0.0, partial=True, noise=noise), start=32, cap=cap, tasks=1,
                               confidence=0.975, replicates=power_replicates, seed=cap + 57, futility=True)
            lines.append(f"| {100 * noise:g} points | {cap} | {100 * rates.within:.1f}% | {100 * rates.futile:.1f}% | "
                         f"{100 * rates.undecided:.1f}% | {rates.mean_items:.0f} |")
    return lines


#: Rows of the ``calibration`` section: (tasks, confidence, outcome, its flip rate or move sd, continuous, caps),
#: the designs of the ``bought``, ``onetask`` and ``continuous`` sections.
CALIBRATION = ((2, 0.975, "2.3% flips", 0.023, False, (256, 372, 512, 644)),
               (2, 0.975, "4.5% flips", 0.045, False, (256, 372, 512, 644)),
               (1, 0.975, "every item moves, sd 3 points", 0.03, True, ONE_TASK_CAPS),
               (1, 0.975, f"every item moves, sd {100 * ONE_TASK_MOVE:g} points", ONE_TASK_MOVE, True, ONE_TASK_CAPS),
               (1, 0.975, "every item moves, sd 8 points", 0.08, True, ONE_TASK_CAPS),
               (2, 0.95, "every item moves, sd 2 points", 0.02, True, (128, 256)),
               (2, 0.95, "every item moves, sd 5 points", 0.05, True, (128, 256)),
               (2, 0.95, "every item moves, sd 10 points", 0.10, True, (128, 256)))


def _calibration(replicates: int) -> list[str]:
    """Issue 56: the chance a plan line gives a cap (:func:`poptune.evaluate.racing.verdict_cost`, from a drop of a
    million items per task moving at the true rate, so that the one move a plan adds is nothing) beside the power
    of seeded races to that cap (futility stop on, as a study's certification)."""
    import math

    from poptune.evaluate.decisions import Scenario, race_error
    from poptune.evaluate.paired import SEQUENTIAL, PairedDrop
    from poptune.evaluate.racing import verdict_cost
    from poptune.interval import Interval

    lines = ["", "## The plan's chance against the race's power (true drop 0, budget 2 points)", "",
             "What a plan line says a cap is worth (`VerdictCost.chance`, at the true flip rate or mean squared move) "
             "and how often seeded races to that cap certify within 2 points: rounds from 32 items per task "
             "doubling to the cap, futility stop on, 0/1 outcomes (`Scenario(0, flips)`) or F1-type scores every "
             "item of which moves by a normal amount (`Scenario(0, 0, partial=True, noise=sd)`).", "",
             "| tasks | confidence | outcome | cap per task | plan's chance | certified within | futile | undecided |",
             "|---|---|---|---|---|---|---|---|"]
    n = 1_000_000
    for tasks, confidence, label, rate, continuous, caps in CALIBRATION:
        names = "ab"[:tasks]
        if continuous:
            seen = PairedDrop(Interval(0.0, -3.0, 3.0), {t: n for t in names}, {t: n for t in names}, SEQUENTIAL,
                              moved={t: n * rate * math.sqrt(2 / math.pi) for t in names},
                              squares={t: n * rate * rate for t in names})
            scenario = Scenario(0.0, 0.0, partial=True, noise=rate)
        else:
            seen = PairedDrop(Interval(0.0, -3.0, 3.0), {t: n for t in names}, {t: round(n * rate) for t in names},
                              SEQUENTIAL)
            scenario = Scenario(0.0, rate)
        for cap in caps:
            chance = verdict_cost(seen, 2.0, planned=cap, start=32, confidence=confidence).chance
            rates = race_error(scenario, start=32, cap=cap, tasks=tasks, confidence=confidence,
                               replicates=replicates, seed=cap + 60, futility=True)
            lines.append(f"| {tasks} | {100 * confidence:g}% | {label} | {cap} | {100 * chance:.1f}% | "
                         f"{100 * rates.within:.1f}% | {100 * rates.futile:.1f}% | {100 * rates.undecided:.1f}% |")
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
    from poptune.interval import Interval

    lines = ["", "## The study's attempts: the error shared (1.25%, then 0.625%), one candidate, true drop 0", "",
             "| flips | attempt 1 at 32 -> 128 per task: certified within (at 2.5% it would be) | the follow-up's size "
             "per task (cost line) | attempt 2 at that size: certified within |", "|---|---|---|---|"]
    for flips in (0.037, 0.10):
        first = race_error(Scenario(0.0, flips), start=32, cap=128, confidence=0.975, replicates=replicates, seed=5)
        alone = race_error(Scenario(0.0, flips), start=32, cap=128, confidence=0.95, replicates=replicates, seed=5)
        seen = PairedDrop(Interval(0.0, -3.0, 3.0), {"a": 200, "b": 200}, {t: round(200 * flips) for t in "ab"},
                          SEQUENTIAL)
        cost = verdict_cost(seen, 2.0, planned=128, start=32, confidence=0.9875)
        second = race_error(Scenario(0.0, flips), start=32, cap=cost.per_task, confidence=0.9875,
                            replicates=replicates, seed=6)
        lines.append(f"| {100 * flips:g}% | {100 * first.within:.1f}% ({100 * alone.within:.1f}%) | {cost.per_task:,} "
                     f"| {100 * second.within:.1f}% |")
    return lines


def _plan(replicates: int, errors: int) -> list[str]:
    """The study's planned first certification: its cap sized from the candidate's search items (2 x 32, their
    flips drawn at the true rate), at most 1,024 per task, spending 1.25%
    (:func:`poptune.tune.certify.plan_certification`
    without a clock), with the futility stop on; true drop 0 (power) and at the budget (error)."""
    import numpy as np

    from poptune.evaluate.decisions import Scenario, race_error
    from poptune.evaluate.paired import SEQUENTIAL, PairedDrop
    from poptune.evaluate.racing import verdict_cost
    from poptune.interval import Interval

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
            seen = PairedDrop(Interval(0.0, 0.0, 0.0), {"a": 32, "b": 32}, flipped, SEQUENTIAL)
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


def _bought(replicates: int, errors: int) -> list[str]:
    """Issue 56: the study's first certification (1.25%, futility stop on) at the caps a time budget buys, not the
    ones its plan asks for: power at true drop 0 and the error at the budget, at the flip rates a study saw."""
    from poptune.evaluate.decisions import Scenario, race_error
    from poptune.evaluate.workload import rounds

    lines = ["", "## What a time budget buys: the first certification at the cap the clock affords (issue 56)", "",
             "The study's first attempt (confidence 97.5%, one-sided 1.25%), rounds from 32 items per task doubling "
             "to the cap, two tasks, futility stop on; the cap is what the time left buys, whatever the plan asked. "
             "Power: true drop 0; error: true drop = budget (2 points), must be at most 1.25%.", "",
             "| cap per task | rounds (items per task) | flips | certified within (drop 0) | futile | undecided | "
             "mean fresh items | declared within at the budget |", "|---|---|---|---|---|---|---|---|"]
    for cap in BOUGHT_CAPS:
        for flips in BOUGHT_FLIPS:
            power = race_error(Scenario(0.0, flips), start=32, cap=cap, confidence=0.975, replicates=replicates,
                               seed=cap, futility=True)
            error = race_error(Scenario(0.02, flips), start=32, cap=cap, confidence=0.975, replicates=errors,
                               seed=cap + 1, futility=True)
            lines.append(f"| {cap:,} | {', '.join(map(str, rounds(32, cap)))} | {100 * flips:g}% | "
                         f"{100 * power.within:.1f}% | {100 * power.futile:.1f}% | {100 * power.undecided:.1f}% | "
                         f"{power.mean_items:.0f} | {100 * error.within:.2f}% |")
    return lines


def _levels(replicates: int) -> list[str]:
    """Issue 58: the error at the budget at the levels the study spends (1.25% for a first attempt, 0.625% for
    the second), each share against its own level."""
    from poptune.evaluate.decisions import Scenario, race_error

    lines = ["", "## Error at the levels the study spends: 1.25% (attempt 1) and 0.625% (attempt 2), true drop = "
             "budget (2 points)", "", "Rounds from 32 items per task doubling to the cap, two tasks, one candidate; "
             "each share must be at most the attempt's one-sided error.", "",
             "| attempt (one-sided error) | cap per task | flips | declared within | declared beyond | undecided |",
             "|---|---|---|---|---|---|"]
    for attempt, confidence in ((1, 0.975), (2, 0.9875)):
        for cap in (128,):
            for label, flips, losses_only in (("10% flips", 0.10, False), ("20% flips", 0.20, False),
                                              ("losses only", 0.02, True)):
                rates = race_error(Scenario(0.02, flips, losses_only), start=32, cap=cap, confidence=confidence,
                                   replicates=replicates, seed=58)
                lines.append(f"| {attempt} ({100 * (1 - confidence) / 2:g}%) | {cap} | {label} | "
                             f"{100 * rates.within:.2f}% | {100 * rates.beyond:.2f}% | {100 * rates.undecided:.1f}% |")
    return lines


def _study_power(replicates: int) -> list[str]:
    """Issue 58: power at the level the study's first attempt spends (1.25%), and the best bound it can give."""
    from poptune.evaluate.decisions import Scenario, race_error
    from poptune.evaluate.paired import paired_drop
    from poptune.evaluate.workload import rounds

    lines = ["", "## Power at the first attempt's level (1.25% one-sided): true drop 0, budget 2 points", "",
             "| cap per task | flips | certified within | mean fresh items | bound with no flip at the cap |",
             "|---|---|---|---|---|"]
    for cap in (128, 512):
        looks = [{"a": n, "b": n} for n in rounds(32, cap)]
        best = paired_drop({"a": [1.0] * cap, "b": [1.0] * cap}, {"a": [1.0] * cap, "b": [1.0] * cap},
                           confidence=0.975, looks=looks, planned=2 * cap).hi
        for flips in (0.0, 0.037, 0.10):
            rates = race_error(Scenario(0.0, flips), start=32, cap=cap, confidence=0.975, replicates=replicates,
                               seed=11)
            lines.append(f"| {cap} | {100 * flips:g}% | {100 * rates.within:.1f}% | {rates.mean_items:.0f} | "
                         f"{best:.2f} |")
    return lines


def _followup(replicates: int, power: int) -> list[str]:
    """Issue 58, item 1: the study's two-attempt path, attempt 2 on new items against the former re-race."""
    from poptune.evaluate.decisions import Scenario
    from poptune.tune.simulate import follow_up

    lines = ["", "## A follow-up certification: attempt 1 (1.25%, 32 -> 128 per task), then attempt 2 (0.625%) sized "
             "by the printed cost line", "",
             "32 search items per task and attempt 1's items give the flip rate; attempt 2 runs when attempt 1 ends "
             "undecided, at the cost line's size rounded up to a multiple of 64 per task (at most 2,048), futility "
             "stop on in both. **New items** (issue 58): attempt 2 scores the items after attempt 1's cap; **same "
             "items** (the former design): it re-raced the fresh items from the first. At a true drop equal to the "
             "budget, \"within\" by either attempt must be at most 1.25% + 0.625% = 1.875%.", "",
             "| true drop | flips | attempt 2 on | replicates | within by attempt 1 | within by attempt 2 | within "
             "in all | beyond | mean attempt-2 size per task |", "|---|---|---|---|---|---|---|---|---|"]
    for drop, flips, count in ((0.02, 0.037, replicates), (0.02, 0.10, replicates), (0.0, 0.037, power),
                               (0.0, 0.10, power)):
        for same in (False, True):
            r = follow_up(Scenario(drop, flips), replicates=count, seed=58, same_items=same, grid=64, most=2048)
            lines.append(f"| {100 * drop:g} | {100 * flips:g}% | {'same items' if same else 'new items'} | {count} | "
                         f"{100 * r.first:.2f}% | {100 * r.second:.2f}% | {100 * r.within:.2f}% | "
                         f"{100 * r.beyond:.2f}% | {r.mean_size:.0f} |")
    return lines


def _unequal(replicates: int) -> list[str]:
    """Issue 58, item 5: tasks of unequal sizes and unequal flip rates (and drops), one race."""
    from poptune.evaluate.decisions import Scenario
    from poptune.tune.simulate import race_tasks

    lines = ["", "## Tasks that differ: unequal sizes, flip rates and drops (one race, confidence 95%)", "",
             "Task a holds 100 items, task b 400; rounds from 32 per task doubling to 400 (task a stops growing at "
             "100: looks 32+32, 64+64, 100+128, 100+256, 100+400). The suite's drop is the mean of the tasks' drops; "
             "at the budget each share must be at most 2.5%.", "",
             "| drops a / b (points) | flips a / b | declared within | declared beyond | undecided | mean items |",
             "|---|---|---|---|---|---|"]
    for (da, db), (fa, fb) in (((2, 2), (0.20, 0.04)), ((3, 1), (0.20, 0.04)), ((1, 3), (0.20, 0.04)),
                               ((2, 2), (0.04, 0.20)), ((0, 0), (0.20, 0.04))):
        rates = race_tasks({"a": (Scenario(da / 100, fa), 100), "b": (Scenario(db / 100, fb), 400)}, start=32,
                           cap=400, replicates=replicates, seed=58)
        lines.append(f"| {da} / {db} | {100 * fa:g}% / {100 * fb:g}% | {100 * rates.within:.2f}% | "
                     f"{100 * rates.beyond:.2f}% | {100 * rates.undecided:.1f}% | {rates.mean_items:.0f} |")
    return lines


def _promise(replicates: int) -> list[str]:
    """Issue 58, item 6: what the cost line's "80%" gives when the true drop is not 0."""
    from poptune.evaluate.decisions import Scenario, race_error
    from poptune.evaluate.paired import SEQUENTIAL, PairedDrop
    from poptune.evaluate.racing import verdict_cost
    from poptune.interval import Interval

    lines = ["", "## The cost line's promise: 80% if the true drop is 0 and items flip as often as seen", "",
             "Sized from 200 items per task at the true flip rate, for a second attempt (0.625%); races of that "
             "size from 32 per task, two tasks, budget 2 points.", "",
             "| flips | size per task | true drop 0: within | true drop 1 (half the budget): within |",
             "|---|---|---|---|"]
    for flips in (0.037, 0.10):
        seen = PairedDrop(Interval(0.0, -3.0, 3.0), {"a": 200, "b": 200}, {t: round(200 * flips) for t in "ab"},
                          SEQUENTIAL)
        cost = verdict_cost(seen, 2.0, planned=128, start=32, confidence=0.9875)
        shares = [race_error(Scenario(drop, flips), start=32, cap=cost.per_task, confidence=0.9875,
                             replicates=replicates, seed=6).within for drop in (0.0, 0.01)]
        lines.append(f"| {100 * flips:g}% | {cost.per_task:,} | {100 * shares[0]:.1f}% | {100 * shares[1]:.1f}% |")
    return lines


def main(argv: list[str] | None = None) -> int:
    import numpy
    import scipy

    from poptune.evaluate.decisions import Scenario, race_error
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
    if "levels" in sections:
        lines += _levels(args.replicates)
    if "studypower" in sections:
        lines += _study_power(args.power_replicates)
    if "followup" in sections:
        lines += _followup(args.replicates, args.power_replicates)
    if "unequal" in sections:
        lines += _unequal(args.replicates)
    if "promise" in sections:
        lines += _promise(args.power_replicates)
    if "continuous" in sections:
        lines += _continuous(args.replicates, args.power_replicates)
    if "bought" in sections:
        lines += _bought(args.power_replicates, args.replicates)
    if "onetask" in sections:
        lines += _one_task(args.replicates, args.power_replicates)
    if "calibration" in sections:
        lines += _calibration(args.power_replicates)
    lines += ["", f"Wall time: {time.monotonic() - started:.0f} s on this project's 2-core CPU."]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
