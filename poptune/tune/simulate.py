"""Seeded simulations of the study's certification paths, on paired outcomes of known truth (issue 58).

:mod:`poptune.evaluate.decisions` measures one race of alike tasks; this module measures what a study does
around it, with the real :func:`poptune.evaluate.racing.race` and the real certification sizes:

- :func:`follow_up`: **the two-attempt path**. A candidate's search items, then attempt 1 on fresh items at the
  first attempt's error (1.25%, futility stop on, as :func:`poptune.tune.certify.certify_front` races on a cap
  not planned short of the verdict), and, when it is not certified within, attempt 2 at 0.625% sized by the cost
  line the study prints
  (:func:`poptune.tune.certify._cost`, the search's and attempt 1's flips together). ``same_items=False`` is the
  design of issue 58: attempt 2 scores only the items after attempt 1's cap; ``same_items=True`` is the former
  one, which re-raced attempt 1's items from the first up to the new cap.
- :func:`race_tasks`: one race over tasks of **unequal sizes and unequal behaviour** (each task its own
  :class:`~poptune.evaluate.decisions.Scenario` and item count): the interval's common shift across tasks, its
  continuity correction of ``1 / (2 sum n)`` and its information in items are what it checks.

The tests (``tests/tune/test_simulate.py``) run them in seconds with a bound that can fail;
``benchmarks/decision_errors.py --sections followup,unequal`` runs them for
``leaderboards/decision-errors-simulated-*.md``.
"""

from __future__ import annotations

import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["FollowUp", "Shares", "follow_up", "race_tasks"]


@dataclass(frozen=True)
class Shares:
    """Shares of simulated races by how they stopped, with the mean items (all tasks) they scored."""

    replicates: int
    within: float
    beyond: float
    futile: float
    undecided: float
    mean_items: float

    def standard_error(self, share: float) -> float:
        return (share * (1 - share) / self.replicates) ** 0.5


@dataclass(frozen=True)
class FollowUp:
    """The two-attempt path's outcomes over ``replicates`` candidates.

    Attributes:
        first: Share certified within by attempt 1.
        second: Share certified within by attempt 2 (of all candidates, not of those attempt 1 left).
        beyond: Share certified beyond by either attempt.
        mean_size: Mean items per task attempt 2 was sized to (over the candidates that had one).
    """

    replicates: int
    first: float
    second: float
    beyond: float
    mean_size: float

    @property
    def within(self) -> float:
        """Share certified within by either attempt: what the study's verdict says."""
        return self.first + self.second

    def standard_error(self, share: float) -> float:
        return (share * (1 - share) / self.replicates) ** 0.5


def _names(count: int) -> list[str]:
    from poptune.evaluate.suite import LOWER_IS_BETTER, PRIMARY_METRIC

    return sorted(t for t, m in PRIMARY_METRIC.items() if m not in LOWER_IS_BETTER)[:count]  # any accuracy tasks


def _run(outcomes: Mapping[str, Sequence[float]], indices: Mapping[str, list[int]] | None = None) -> Any:
    from poptune.evaluate.suite import TaskRun

    items = {t: list(v) for t, v in indices.items()} if indices else {t: list(range(len(v))) for t, v in
                                                                      outcomes.items()}
    return TaskRun({t: {"acc": sum(v) / len(v)} for t, v in outcomes.items() if v}, items,
                   {t: list(v) for t, v in outcomes.items()})


def _race(drawn: Mapping[str, tuple[Sequence[float], Sequence[float]]], *, start: int, cap: int, max_drop: float,
          confidence: float, futility: bool) -> Any:
    """The real race over pre-drawn paired items per task (full, configuration), each task capped at its own."""
    from poptune.evaluate.racing import RacingPolicy, race
    from poptune.evaluate.workload import Workload

    sizes = {t: len(full) for t, (full, _) in drawn.items()}
    workload = Workload({t: list(range(n)) for t, n in sizes.items()}, {t: [0] * n for t, n in sizes.items()})
    policy = RacingPolicy(start=min(start, cap), cap=cap)

    def full(wanted: dict[str, int]) -> Any:
        return _run({t: drawn[t][0][: wanted[t]] for t in drawn})

    def score(new: dict[str, list[int]]) -> Any:
        return _run({t: [drawn[t][1][i] for i in new[t]] for t in new}, new)

    return race(workload, policy, score=score, full=full, max_drop=max_drop, confidence=confidence,
                futility=futility)


def race_tasks(tasks: Mapping[str, tuple[Any, int]], *, start: int, cap: int, max_drop: float = 2.0,
               confidence: float = 0.95, replicates: int = 300, seed: int = 0, futility: bool = False) -> Shares:
    """The verdicts of the real race over tasks that differ: ``tasks`` maps a label to (its
    :class:`~poptune.evaluate.decisions.Scenario`, its items), rounds from ``start`` per task doubling to ``cap``
    (a task with fewer items stops growing at its size). The true drop is the mean of the scenarios' drops."""
    import numpy as np

    names = _names(len(tasks))
    rng = np.random.default_rng(seed)
    counts = {"within budget": 0, "beyond budget": 0, "futile": 0}
    items = 0
    for _ in range(replicates):
        drawn = {name: scenario.draw(rng, size) for name, (scenario, size) in zip(names, tasks.values())}
        result = _race(drawn, start=start, cap=cap, max_drop=max_drop, confidence=confidence, futility=futility)
        counts[result.stopped] = counts.get(result.stopped, 0) + 1
        items += result.drop.total
    within, beyond, futile = (counts[k] / replicates for k in ("within budget", "beyond budget", "futile"))
    return Shares(replicates, within, beyond, futile, 1 - within - beyond - futile, items / replicates)


def _slice(drawn: Mapping[str, tuple[Any, Any]], first: int, last: int) -> dict[str, tuple[Any, Any]]:
    return {t: (full[first:last], other[first:last]) for t, (full, other) in drawn.items()}


def follow_up(scenario: Any, *, search: int = 32, first_cap: int = 128, most: int = 4096, tasks: int = 2,
              max_drop: float = 2.0, replicates: int = 300, seed: int = 0, same_items: bool = False,
              grid: int = 1, size: int | None = None) -> FollowUp:
    """The study's two-attempt path on a candidate behaving as ``scenario`` (module docstring).

    ``search`` items per task scored in the search (its flips enter the cost line), attempt 1 on ``first_cap``
    fresh items per task, attempt 2 sized by the cost line printed after attempt 1 (at most ``most`` per task)
    on the items after attempt 1's cap, or, with ``same_items``, on the fresh items from the first (the former
    design). Both attempts stop for futility as the study's do. ``grid``: attempt 2's size rounded up to a
    multiple of it (1: as printed; a coarser grid lets the simulation reuse each design's boundaries, which take
    about a second each to compute, at the price of slightly more items than the cost line says); ``size``:
    attempt 2's items per task fixed instead (the other design issue 58 allows, and fast to simulate)."""
    import numpy as np

    from poptune.evaluate.paired import PairedDrop
    from poptune.tune.certify import CERTIFY_START, _confidence, _cost

    rng = np.random.default_rng(seed)
    names = _names(tasks)
    first = second = beyond = 0
    sizes: list[int] = []
    costs: dict[Any, dict[str, Any]] = {}  # the cost line depends on the counts alone
    for _ in range(replicates):
        searched = {t: scenario.draw(rng, search) for t in names}
        fresh = {t: scenario.draw(rng, first_cap + most) for t in names}
        one = _race(_slice(fresh, 0, first_cap), start=CERTIFY_START, cap=first_cap, max_drop=max_drop,
                    confidence=_confidence(1, 1), futility=True)
        if one.stopped not in ("within budget", "beyond budget"):  # undecided: the cost line prints a follow-up
            seen = PairedDrop.from_dict({"mean": 0.0, "lo": 0.0, "hi": 0.0, "items": {t: search for t in names},
                                         "flipped": {t: sum(a != b for a, b in zip(*searched[t])) for t in names}})
            used = 0 if same_items else first_cap
            problem = types.SimpleNamespace(max_drop=max_drop, certify_limit=first_cap)
            key = (tuple(seen.flipped.values()), tuple(one.drop.flipped.values()), one.drop.total)
            if size is not None:
                costs[key] = {"per_task": used + size}
            elif key not in costs:
                # ignore: `problem` stands in for a TuningProblem with the two fields _cost reads
                cost = _cost(seen.to_dict(), one.drop, 1.0, problem, _confidence(2, 1), used)  # type: ignore[arg-type]
                assert cost is not None  # max_drop > 0: a budget to cost the verdict against
                costs[key] = cost
            second_cap = min(-(-(int(costs[key]["per_task"]) - used) // grid) * grid, most)
            sizes.append(second_cap)
            begin = 0 if same_items else first_cap
            two = _race(_slice(fresh, begin, begin + second_cap), start=CERTIFY_START, cap=second_cap,
                        max_drop=max_drop,
                        confidence=_confidence(2, 1), futility=True)
            second += two.stopped == "within budget"
            beyond += two.stopped == "beyond budget"
        first += one.stopped == "within budget"
        beyond += one.stopped == "beyond budget"
    return FollowUp(replicates, first / replicates, second / replicates, beyond / replicates,
                    sum(sizes) / len(sizes) if sizes else 0.0)
