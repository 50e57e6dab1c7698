"""Racing: score a configuration on growing rounds of a workload's items until its drop is decided.

Every configuration takes the workload's items in the same fixed order. After each round (``start`` items per
task, then ``growth`` times more, up to ``cap``) the paired drop against the full model on the same items gets
its 95% interval, and scoring stops as soon as the interval lies

- wholly inside the budget (upper end <= ``max_drop``: ``within budget``) or wholly outside it (lower end >
  ``max_drop``: ``beyond budget``), or,
- without a budget, once its half-width is at most ``target_halfwidth`` points.

**Error over all looks.** The rounds are planned before any outcome is seen (:func:`planned_looks`), and the
interval is the score test's repeated bounds over that group-sequential design (:mod:`poptune.evaluate.paired`,
:mod:`poptune.evaluate.groupseq`): each end is wrong with probability at most 2.5% over all the rounds together,
so racing's looks need no further correction. When the true drop equals the budget, ``within budget`` is
declared with probability at most 2.5% over the whole race, and likewise ``beyond budget``
(:func:`poptune.evaluate.decisions.race_error` measures both by simulation), whatever cap the plan chose: the
last planned look, on or off the doubling grid and however close to the one before, spends all the error the
earlier ones left (:func:`poptune.evaluate.groupseq.boundaries`). "Within budget" spends by
O'Brien-Fleming, keeping almost all the error for the last round, so a race to its cap is nearly as powerful as
one fixed-size test; "beyond budget" spends earlier (Hwang-Shih-DeCani, gamma -2), so a hopeless configuration
is rejected at the first round (:data:`poptune.evaluate.paired.LOWER_SPENDING`). With no item flipped, the upper
end falls to 2 points after about 240 items; at 10% flips it takes about 2,000 (:func:`verdict_cost` says how many for a
race's observed flip rate), so a search's few dozen items per task mostly end at the cap (``cap``) or
``beyond budget``; deciding ``within`` is the certification's job, on fresh items (:mod:`poptune.tune.certify`).

A clearly broken configuration is decided after the first round; a borderline one gets every item up to the
cap. The full model's outcomes are scored once per item and shared by every configuration.

**Futility** (opt-in, ``race(futility=True)``): a race also stops, ``stopped == "futile"``, after a round from
which the conditional power of a verdict within the budget by the cap is under 5% (:func:`conditional_power`:
the items to come assumed to lose nothing and to flip as often as those seen). The stop is non-binding: the
boundaries do not count on it, so neither verdict's error can grow; it gives up races that would almost surely
end at the cap or beyond the budget, sooner.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from poptune import progress
from poptune.errors import ConfigError
from poptune.evaluate.answers import ITEMS_KEY
from poptune.evaluate.paired import SEQUENTIAL, PairedDrop
from poptune.evaluate.suite import LIKELIHOOD_ITEMS, LOWER_IS_BETTER, PRIMARY_METRIC, TaskRun, drop_of
from poptune.evaluate.workload import Workload, rounds

__all__ = ["RacingPolicy", "RaceResult", "VerdictCost", "race", "race_together", "extend_run", "planned_looks",
           "verdict_cost", "conditional_power", "planning_rate", "FUTILITY_POWER"]

#: ``race(futility=True)`` stops a race whose conditional power of a verdict within the budget is below this.
FUTILITY_POWER = 0.05


@dataclass(frozen=True)
class RacingPolicy:
    """How many items a configuration's accuracy may take.

    Attributes:
        start: Items per task in the first round.
        cap: Items per task at most.
        growth: Each round scores this many times the items of the previous one.
        target_halfwidth: Without a budget, stop once the drop's interval is this narrow (points each side).
    """

    start: int = 32
    cap: int = 128
    growth: float = 2.0
    target_halfwidth: float = 2.0

    def __post_init__(self) -> None:
        for name in ("start", "cap"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"`{name}` must be a positive integer of items, got {value!r}")
        if self.start > self.cap:
            raise ConfigError(f"the first round ({self.start} items) must not exceed the cap ({self.cap})")
        if not (isinstance(self.growth, (int, float)) and self.growth > 1):
            raise ConfigError(f"`growth` must be > 1, got {self.growth!r}")
        if not (isinstance(self.target_halfwidth, (int, float)) and self.target_halfwidth > 0):
            raise ConfigError(f"`target_halfwidth` must be > 0 points, got {self.target_halfwidth!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RaceResult:
    """A configuration's scored items, its paired drop on them, and why scoring stopped."""

    run: TaskRun
    drop: PairedDrop
    rounds: int
    stopped: str  # "within budget", "beyond budget", "narrow enough", "cap", "futile" (``race(futility=True)``)


def extend_run(run: TaskRun | None, more: TaskRun) -> TaskRun:
    """``run`` followed by ``more`` (same tasks): items and outcomes appended, aggregates re-weighted."""
    if run is None:
        return TaskRun({t: dict(m) for t, m in more.scores.items()}, {t: list(v) for t, v in more.items.items()},
                       {t: list(v) for t, v in more.outcomes.items()}, dict(more.details))
    merged = TaskRun({}, {}, {}, {**run.details, **more.details})
    if ITEMS_KEY in run.details and ITEMS_KEY in more.details:  # per-item prompt figures: every round's kept
        merged.details[ITEMS_KEY] = {**run.details[ITEMS_KEY], **more.details[ITEMS_KEY]}
    if LIKELIHOOD_ITEMS in run.details and LIKELIHOOD_ITEMS in more.details:  # the same, per likelihood task
        before, after = run.details[LIKELIHOOD_ITEMS], more.details[LIKELIHOOD_ITEMS]
        merged.details[LIKELIHOOD_ITEMS] = {t: {**before.get(t, {}), **after.get(t, {})} for t in {*before, *after}}
    for task in run.items:
        n, m = len(run.items[task]), len(more.items.get(task, []))
        merged.items[task] = run.items[task] + more.items.get(task, [])
        merged.outcomes[task] = run.outcomes[task] + more.outcomes.get(task, [])
        extra = more.scores.get(task, {})
        merged.scores[task] = {k: (v * n + extra.get(k, v) * m) / (n + m) for k, v in run.scores[task].items()}
    return merged


def _decide(drop: PairedDrop, max_drop: float | None, policy: RacingPolicy) -> str | None:
    if max_drop is not None:
        if drop.within(max_drop):
            return "within budget"
        if drop.beyond(max_drop):
            return "beyond budget"
        return None
    return "narrow enough" if drop.half_width <= policy.target_halfwidth else None


def race(
    workload: Workload,
    policy: RacingPolicy,
    *,
    score: Callable[[dict[str, list[int]]], TaskRun],
    full: Callable[[dict[str, int]], TaskRun],
    max_drop: float | None,
    seed: int = 0,
    confidence: float = 0.95,
    futility: bool = False,
    resize: Callable[[float, int], tuple[int, bool]] | None = None,
) -> RaceResult:
    """Score rounds of the workload's items with ``score`` until the drop is decided (module docstring).

    Args:
        workload: The items, in order.
        policy: Round sizes, cap and the width target.
        score: Scores the configuration on the given item indices per task.
        full: Returns the full model's run covering at least the first n items of each task (scoring what is
            missing).
        max_drop: The accuracy budget in points, or None.
        seed: Seed of the bootstrap (unbounded metrics only).
        confidence: Two-sided confidence of the drop's interval (a certification of several candidates at
            once spends its error among them).
        futility: Also stop, with ``stopped == "futile"``, after a look from which a verdict within the budget
            by the cap has a conditional power under :data:`FUTILITY_POWER` (:func:`conditional_power`). The
            stop is non-binding: the design's boundaries do not count on it, so it can only lower the error of
            either verdict; it gives up only a race that would almost surely not end within the budget.
        resize: Called once, with the seconds the first round took and its items, before its look: returns the
            cap (items per task) and whether the futility stop is on. The design's looks are fixed then, from the
            clock, before the round's look (a time-budgeted certification prices its items by what its own first
            round cost, :class:`poptune.tune.certify.Repricing`). The round's seconds are not outcome-free: they
            include generating the answers, whose lengths go with what the answers are (and, under the likelihood
            judge, scoring them), so the cap may lean on the first round's outcomes through its clock; the design's
            error is proven for caps fixed in advance, not for this one (issue 86).

    Each round is a phase of :mod:`poptune.progress`.

    Raises:
        ConfigError: A budget over tasks whose metrics are all unbounded (bits per byte): their interval is an
            approximate one-look bootstrap, which cannot keep a verdict's error over a race's looks.
    """
    return race_together(workload, policy, scores=[score], full=full, max_drop=max_drop, seed=seed,
                         confidence=confidence, futility=futility, resize=resize)[0]


def race_together(
    workload: Workload,
    policy: RacingPolicy,
    *,
    scores: Sequence[Callable[[dict[str, list[int]]], TaskRun]],
    full: Callable[[dict[str, int]], TaskRun],
    max_drop: float | None,
    seed: int = 0,
    confidence: float = 0.95,
    futility: bool = False,
    resize: Callable[[float, int], tuple[int, bool]] | None = None,
    racing: Callable[[list[int]], None] | None = None,
) -> list[RaceResult]:
    """Race several configurations round by round: each of ``scores`` is :func:`race`'s ``score`` of one.

    Every round's items are scored by each configuration still racing, one after the other, so a shared trunk
    can score them all in one pass (:meth:`poptune.problem.evaluator.ConfigEvaluator.race_together`). Each race
    stops on its own and is the race :func:`race` runs alone, look for look: the plan, the items and the
    boundaries depend on no other configuration's outcomes. ``racing`` is told, before each round, the indices
    of the configurations still racing; ``resize`` (one configuration only) and the rest are :func:`race`'s.
    """
    if resize is not None and len(scores) != 1:
        raise ConfigError("a race's cap is resized from its own first round: race one configuration to resize it")
    _check_bounded(workload, max_drop)
    runs: list[TaskRun | None] = [None] * len(scores)
    drops: list[PairedDrop | None] = [None] * len(scores)
    results: list[RaceResult | None] = [None] * len(scores)
    plan = planned_looks(workload, policy)
    looks: list[dict[str, int]] = []
    number = 0
    while number < len(plan) and (alive := [i for i, r in enumerate(results) if r is None]):
        wanted = plan[number]
        number += 1
        if racing is not None:
            racing(alive)
        started = time.perf_counter()
        with progress.phase(f"round {number}: {max(wanted.values())} items per task", unit="request"):
            reference = full(wanted)  # first: the full model's prefill of an item is what a reused state replays
            for i in alive:
                run = runs[i]
                new = {t: workload.order[t][len(run.items[t]) if run else 0 : n] for t, n in wanted.items()}
                runs[i] = extend_run(run, _complete(scores[i]({t: v for t, v in new.items() if v}), run, workload))
        if resize is not None and number == 1:  # the design, fixed from the round's seconds, before its look
            run = runs[0]
            assert run is not None
            cap, futility = resize(time.perf_counter() - started, sum(map(len, run.items.values())))
            plan = planned_looks(workload, replace(policy, cap=max(cap, policy.start)))
        looks.append(wanted)
        progress.advance()
        for i in alive:
            run = runs[i]
            assert run is not None
            drop = drops[i] = drop_of(reference, run, seed=seed, confidence=confidence, looks=looks,
                                      planned=plan[-1])
            verdict = _decide(drop, max_drop, policy) or (
                "futile" if futility and number < len(plan) and _futile(drop, max_drop, plan, confidence) else None)
            if verdict is not None:
                results[i] = RaceResult(run, drop, number, verdict)
    done = []
    for run, last, result in zip(runs, drops, results):
        if result is None:
            assert run is not None and last is not None and math.isfinite(last.mean)
            result = RaceResult(run, last, len(plan), "cap")
        done.append(result)
    return done


def _check_bounded(workload: Workload, max_drop: float | None) -> None:
    """Refuse a budget over tasks whose metrics are all unbounded (:func:`race`'s ``ConfigError``)."""
    if max_drop is not None and workload.order and all(
            PRIMARY_METRIC.get(t) in LOWER_IS_BETTER for t in workload.order):
        raise ConfigError(f"an accuracy budget needs a bounded metric (accuracy, F1, exact match); "
                          f"{', '.join(sorted(workload.order))} score bits per byte, which no valid interval bounds: "
                          "race them without a budget")


def _futile(drop: PairedDrop, max_drop: float | None, plan: Sequence[Mapping[str, int]], confidence: float) -> bool:
    """Whether a verdict within ``max_drop`` by the plan's last look has become hopeless (:data:`FUTILITY_POWER`)."""
    return max_drop is not None and drop.method == SEQUENTIAL and \
        conditional_power(drop, max_drop, plan, confidence=confidence) < FUTILITY_POWER


def conditional_power(drop: PairedDrop, budget: float, plan: Sequence[Mapping[str, int]], *,
                      confidence: float = 0.95) -> float:
    """The chance that a race that has seen ``drop`` ends "within ``budget``" at its last planned look, if the
    items still to come lose nothing (true drop 0) and flip as often as the items seen so far.

    Stochastic curtailment (Lan, Simon and Halperin, "Stochastically curtailed tests in long-term clinical
    trials", Sequential Analysis 1, 1982) on the score test's last look: with ``N`` items planned in all, ``n``
    seen with mean difference ``x``, flip rate ``f`` (:func:`planning_rate`: one added so that none seen is not
    0), ``V`` the test's variance at the budget ``b`` and ``c`` the design's last boundary, it is
    ``Phi((N b - 1/2 - c sqrt(V N) - n x) / sqrt((N - n) f))`` (in fractions, not points). 1 when nothing is
    left to score and the verdict is already within. Used by :func:`race` (``futility=True``), non-binding.
    """
    from scipy.stats import norm

    from poptune.evaluate.groupseq import boundaries
    from poptune.evaluate.paired import UPPER_SPENDING, restricted_variance

    planned = sum(plan[-1].values())
    seen = drop.total
    left = planned - seen
    if left <= 0:
        return 1.0 if drop.within(budget) else 0.0
    b, mean = budget / 100, drop.mean / 100
    flips = planning_rate(drop)
    variance = restricted_variance(flips / 2, flips / 2, 1.0, b)
    fractions = [sum(look.values()) / planned for look in plan]
    last = boundaries(fractions, (1 - confidence) / 2, UPPER_SPENDING)[-1]
    room = planned * b - 0.5 - last * math.sqrt(variance * planned) - seen * mean
    return float(norm.cdf(room / math.sqrt(left * flips)))


def planned_looks(workload: Workload, policy: RacingPolicy) -> list[dict[str, int]]:
    """Items per task at each of a race's looks, fixed before any outcome: the policy's rounds, each task
    capped at its size (a round that adds no item is not a look)."""
    plan: list[dict[str, int]] = []
    for count in rounds(policy.start, policy.cap, policy.growth):
        wanted = {t: min(count, workload.size(t)) for t in workload.order}
        if not plan or wanted != plan[-1]:
            plan.append(wanted)
    if not plan or not any(plan[0].values()):
        raise ConfigError("a race needs items: every task of the workload is empty")
    return plan


def _complete(part: TaskRun, run: TaskRun | None, workload: Workload) -> TaskRun:
    """A round's run with an empty entry for each task it did not need (already exhausted)."""
    for task in workload.order:
        if task not in part.items:
            part.items[task], part.outcomes[task] = [], []
            part.scores[task] = dict(run.scores[task]) if run else {}
    return part


@dataclass(frozen=True)
class VerdictCost:
    """What a verdict within a budget would cost a race that loses nothing, at the flip rate seen so far.

    Attributes:
        flip_rate: The share of items assumed to flip (seen so far, one added so that none seen is not 0,
            :func:`planning_rate`); for a continuous outcome, the mean squared difference per item
            (:attr:`PairedDrop.flip_mass`), the moves' spread the plan's stand-in sample has
            (:func:`_test_variance`).
        per_task: Items per task the race's cap must allow for the verdict with probability ``power``.
        tasks: The race's tasks.
        budget: The budget the items are for (points).
        smallest_budget: The smallest budget (points) that ``planned`` items per task certify with that
            probability at this flip rate.
        planned: The items per task the race planned.
        power: The probability of the verdict the figures are sized for.
        chance: The probability that ``planned`` items per task certify ``budget`` at true drop 0 and this flip
            rate (the last look's score test, as the size; the earlier looks add a little and the futility stop
            takes a little: the seeded simulation finds it within a few points, ``tests/evaluate/test_decisions.py``
            and ``leaderboards/decision-errors-simulated-*``).
    """

    flip_rate: float
    per_task: int
    tasks: int
    budget: float
    smallest_budget: float
    planned: int
    power: float = 0.8
    chance: float = 0.0

    @property
    def items(self) -> int:
        """Items in all (every task)."""
        return self.per_task * self.tasks


def planning_rate(drop: PairedDrop) -> float:
    """The flip rate a plan sizes items for: ``drop``'s movement per item (:attr:`PairedDrop.flip_mass`, its flips
    for 0/1 outcomes, its squared differences for a continuous one) with one more item moved, so that nothing
    seen is not nothing to come: one flip for 0/1 outcomes (or when nothing moved), one move of the size seen
    (the squares' sum over the absolute values') for a continuous one."""
    mass, moved = drop.flip_mass, sum(drop.moved.values())
    size = mass / moved if drop.squares and moved > 0 else 1.0
    return (mass + size * size) / (drop.total + 2)


def _continuous(drop: PairedDrop) -> bool:
    """Whether ``drop``'s outcome is continuous (its squared moves known and not its flips' count): its test fits
    the empirical likelihood over the moves and the scale's ends, not the counts of flips."""
    return bool(drop.squares) and any(abs(drop.squares[t] - drop.flipped.get(t, 0)) > 1e-9 for t in drop.squares)


#: Points of the sample a plan stands in for a continuous outcome's items by (:func:`_test_variance`).
_STAND_IN = 64


def _test_variance(mean: float, flips: float, b: float, continuous: bool) -> float:
    """The score test's variance of one item at the budget ``b`` (a share), fitted to items whose mean difference
    is ``mean`` and which move as ``flips`` says: Tango's restricted fit to that many flips, split to give the mean
    (:func:`poptune.evaluate.paired.restricted_variance`), or, for a continuous outcome, the empirical likelihood's
    (:func:`poptune.evaluate.paired.el_moments`) over normal moves of root mean square ``sqrt(flips)`` around the
    mean. It grows as the mean falls below the budget: the more the fit must carry to reach it, the more its
    weight sits at the scale's end -- for small moves almost all of it, which is why a few hundred items cannot
    certify 2 points however little they move (about ``c^2 / b``, the binary bound with no flip)."""
    import numpy as np
    from scipy.stats import norm

    from poptune.evaluate.paired import el_moments, restricted_variance

    if not continuous:
        return restricted_variance(max((flips - mean) / 2, 0.0), max((flips + mean) / 2, 0.0), 1.0, b)
    moves = np.clip(mean + math.sqrt(flips) * norm.ppf((np.arange(_STAND_IN) + 0.5) / _STAND_IN), -1.0, 1.0)
    return el_moments(moves, np.ones(_STAND_IN), b)[0]


def _threshold(points: float, flips: float, per_task: int, tasks: int, start: int, growth: float, alpha: float,
               continuous: bool) -> float | None:
    """The largest mean difference (a share) at which a design capped at ``per_task`` items per task certifies
    ``points`` at its last look: where ``b - mean - 1 / (2 N) = c * sqrt(V(mean) / N)``, ``c`` the design's last
    boundary (:mod:`poptune.evaluate.groupseq`; its earlier looks add little under O'Brien-Fleming spending), the
    test's continuity correction ``1 / (2 N)`` and ``V`` :func:`_test_variance`. None where no mean within 8
    standard errors of 0 certifies it."""
    from scipy.optimize import brentq

    from poptune.evaluate.groupseq import boundaries

    b, n = points / 100, per_task * tasks
    last = boundaries([c / per_task for c in rounds(min(start, per_task), per_task, growth)], alpha)[-1]

    def margin(mean: float) -> float:  # >= 0 where the last look certifies
        return b - mean - 1 / (2 * n) - last * math.sqrt(_test_variance(mean, flips, b, continuous) / n)

    lowest = -8 * math.sqrt(flips / n)
    if not continuous:
        lowest = max(lowest, -flips)  # no more gains than flips
    grid = [b + (lowest - b) * k / 64 for k in range(65)]  # from the budget down: the first mean that certifies
    for upper, lower in zip(grid, grid[1:]):
        if margin(lower) >= 0:
            return lower if margin(upper) >= 0 else float(brentq(margin, lower, upper, xtol=1e-12))
    return None


def _chance(points: float, flips: float, per_task: int, tasks: int, start: int, growth: float, alpha: float,
            continuous: bool = False) -> float:
    """The probability that a design capped at ``per_task`` items per task certifies ``points`` at true drop 0
    when items move as ``flips`` says: that the mean of ``N = per_task * tasks`` items, spread by
    ``sqrt(flips / N)``, falls at or below :func:`_threshold`."""
    from scipy.stats import norm

    mean = _threshold(points, flips, per_task, tasks, start, growth, alpha, continuous)
    if mean is None:
        return 0.0
    if flips <= 0:  # nothing moves (a continuous outcome's moves too small to count): the mean is 0
        return float(mean >= 0)
    return float(norm.cdf(mean / math.sqrt(flips / (per_task * tasks))))


def _items(points: float, flips: float, tasks: int, start: int, growth: float, alpha: float, power: float,
           continuous: bool) -> int:
    """The fewest items per task whose design certifies ``points`` with probability ``power`` (:func:`_chance`,
    the design capped at that many), by bisection."""
    def enough(per_task: int) -> bool:
        return _chance(points, flips, per_task, tasks, start, growth, alpha, continuous) >= power

    lo, hi = 0, max(start, 1)
    while not enough(hi):
        lo, hi = hi, 2 * hi
        if hi > 1 << 24:
            return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    return hi


def verdict_cost(drop: PairedDrop, budget: float, *, planned: int, start: int, growth: float = 2.0,
                 confidence: float = 0.95, power: float = 0.8) -> VerdictCost:
    """The items per task a race of ``start`` items per task, growing to its cap, needs to certify ``budget``
    points with probability ``power`` when the true drop is 0 and items flip as often as in ``drop``.

    The size is the score test's at the design's last look: the fewest items per task whose mean, at true drop 0,
    falls under the highest mean that look certifies (:func:`_threshold`) with probability ``power``. The test's
    variance is taken where that mean is, not at 0: below the budget it grows, most for a continuous outcome of
    small moves, whose fit carries the budget by mass at the scale's end. The seeded simulation checks the sizes
    and chances (``tests/evaluate/test_decisions.py``; ``leaderboards/decision-errors-simulated-*``).
    ``planned``: the cap the race had, per task.
    """
    if budget <= 0:
        raise ConfigError(f"a verdict's cost needs a positive budget, got {budget:g} points")
    tasks = max(len(drop.items), 1)
    flips, continuous = planning_rate(drop), _continuous(drop)
    alpha = (1 - confidence) / 2
    per_task = _items(budget, flips, tasks, start, growth, alpha, power, continuous)
    lo, hi = 1e-3, 100.0  # the smallest budget the planned items certify with that probability: bisection
    while hi - lo > 1e-3:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if _chance(mid, flips, planned, tasks, start, growth, alpha, continuous) >= power \
            else (mid, hi)
    chance = _chance(budget, flips, planned, tasks, start, growth, alpha, continuous)
    return VerdictCost(flips, per_task, tasks, budget, hi, planned, power, chance)
