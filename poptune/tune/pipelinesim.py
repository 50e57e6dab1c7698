"""The main command's whole decision path simulated, many seeded pipelines at once (issue 86, item 5).

:mod:`poptune.evaluate.vectorsim` measures one certification race; what a study's verdict means also depends on
what comes before it. Each simulated pipeline is one study of eight configurations of known truth
(:class:`Truth`: true drop, flip rate, speedup) on 0/1 items of ``tasks`` alike tasks:

1. **the search's race**: every configuration raced on the same positions' search items (rounds from 8 per task
   doubling to 32, 95%, no futility stop: :func:`poptune.evaluate.vectorsim.decide`, the score test of
   :func:`poptune.evaluate.racing.race`), each its own draws; rejected ("beyond budget": its lower end over the
   budget) or kept with the drop and flips its items showed; its speedup measured with a lognormal noise;
2. **the selection**: the kept rows' Pareto front on (time to first token, accuracy) by the study's own
   :func:`poptune.store.front.nondominated`, its candidate by :func:`poptune.store.front.candidates` (the fastest
   whose drop so far is within the budget, one as by default);
3. **the plan**: :func:`poptune.tune.certify._sized` on the candidate's search drop (the items a verdict needs at
   its flip rate, at most ``supply`` per task: the preset's 1,024, or what a clock buys), and where it cannot buy the
   verdict the fastest slower candidate whose verdict it buys (:func:`poptune.tune.certify._decidable`'s rule);
4. **the certification**: the chosen candidate raced on fresh items at the first attempt's error
   (:func:`poptune.tune.certify.attempt_error`: 1.25% one-sided), rounds from 32 per task to the plan's cap, the
   futility stop on where the plan buys the verdict (:func:`poptune.tune.certify.certify_front`'s rule).

What is not simulated: Optuna's choice of configurations (the eight are given), a time budget's clock (a clock's
purchase is a smaller ``supply``), the first round's re-sizing (:class:`poptune.tune.certify.Repricing`), the
confirmation pass (speedups only). :func:`accuracy_cost_power` checks :func:`poptune.tune.certify.accuracy_cost`'s
F1 sizing the same way. ``benchmarks/pipeline_errors.py`` runs both for the decision-error board;
``tests/tune/test_pipelinesim.py`` checks them against the real functions.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any

__all__ = ["F1Grades", "PipelineRow", "PipelineScenario", "Truth", "accuracy_cost_power", "simulate_pipelines"]


@dataclass(frozen=True)
class Truth:
    """One configuration's truth: its true drop (points), the share of items it flips, its true speedup."""

    drop: float
    flips: float
    speedup: float


@dataclass(frozen=True)
class PipelineScenario:
    """Eight (or any number of) configurations and the study's design around them.

    Attributes:
        label: What the scenario is.
        configs: The configurations' truths.
        tasks: Alike tasks (0/1 outcomes each).
        supply: Items per task the plan may take (the preset's 1,024; smaller: what a clock buys).
        speed_noise: The measured speedup's lognormal noise (sd of its log).
    """

    label: str
    configs: tuple[Truth, ...]
    tasks: int = 2
    supply: int = 1024
    speed_noise: float = 0.02
    budget: float = 2.0
    search: tuple[int, int] = (8, 32)


@dataclass(frozen=True)
class PipelineRow:
    """What ``pipelines`` seeded studies of a scenario ended with.

    Attributes:
        candidates: Studies whose front held a candidate (a certification ran).
        within: Studies that printed "certified within".
        wrong: Of those, the certified configuration's true drop at or over the budget (the verdict is wrong).
        right: Of those, its true drop under the budget.
        zero: Studies whose certified configuration's true drop is 0; ``zero_within``: of those, certified within;
            ``promised``: the plan's power summed over them (80%, or its printed chance where it bought less).
        seen_rate, raw_rate, true_rate: The certified candidate's planning flip rate (its search items' flips, one
            added), the share of its search items that flipped, and its true flip rate, each summed over the studies
            that certified: the selection's bias is ``raw_rate`` against ``true_rate``.
        planned: Items per task the plans chose, summed over the certifications; ``passed_over``: certifications
            of a slower candidate because the fastest's verdict was out of reach.
        at_zero: The studies whose certified configuration's true drop is 0 by (its true flip rate, whether its
            plan bought the verdict: promised 80%; else its printed chance): (studies, certified within, promise
            summed).
    """

    pipelines: int
    candidates: int
    within: int
    wrong: int
    right: int
    zero: int
    zero_within: int
    promised: float
    seen_rate: float
    raw_rate: float
    true_rate: float
    planned: int
    passed_over: int
    at_zero: dict[tuple[float, bool], tuple[int, int, float]] = field(default_factory=dict)


def _scenario(truth: Truth) -> Any:
    from poptune.evaluate.vectorsim import GridScenario

    return GridScenario.binary(truth.drop / 100, truth.flips)


def _search(scenario: PipelineScenario, rng: Any, size: int) -> list[tuple[Any, Any, Any, Any]]:
    """Each configuration's search race over ``size`` studies: (verdict, items per task, drop in points, flips)."""
    import numpy as np

    from poptune.evaluate.vectorsim import decide
    from poptune.evaluate.workload import rounds

    start, cap = scenario.search
    looks = rounds(start, cap)
    values = np.array([-1.0, 0.0, 1.0])
    out = []
    for truth in scenario.configs:
        drawn = _scenario(truth).draw(rng, (scenario.tasks, size, cap))
        verdicts, spent = decide(drawn, values, looks, 0.025, scenario.budget)
        per_task = (spent / scenario.tasks).astype(int)
        keep = np.arange(cap)[None, :] < per_task[:, None]
        diffs = [np.where(keep, values[d], 0.0) for d in drawn]
        drop = 100 * sum(d.sum(axis=1) / per_task for d in diffs) / scenario.tasks
        flips = sum((d != 0).sum(axis=1) for d in diffs)
        out.append((verdicts, per_task, drop, flips))
    return out


class _Plans:
    """:func:`poptune.tune.certify._sized` for a candidate's search items, remembered by what it depends on."""

    def __init__(self, scenario: PipelineScenario, confidence: float) -> None:
        self.scenario, self.confidence = scenario, confidence
        self.known: dict[tuple[int, int], Any] = {}

    def __call__(self, per_task: int, flips: int) -> Any:
        from poptune.evaluate.paired import PairedDrop
        from poptune.interval import Interval
        from poptune.tune.certify import _sized

        key = (per_task, flips)
        if key not in self.known:
            tasks = [f"t{i}" for i in range(self.scenario.tasks)]
            flipped = {t: (flips if i == 0 else 0) for i, t in enumerate(tasks)}  # the plan reads the total
            seen = PairedDrop(Interval(0.0, 0.0, 0.0), {t: per_task for t in tasks}, flipped)
            self.known[key] = _sized(seen, self.scenario.budget, self.scenario.supply, self.confidence, None, None)
        return self.known[key]


def _select(scenario: PipelineScenario, searched: list[tuple[Any, Any, Any, Any]], speeds: Any, study: int,
            plans: _Plans) -> tuple[int, Any, bool] | None:
    """One study's certified candidate (index), its plan and whether it passed over the fastest; None without."""
    from poptune.engine import PopConfig
    from poptune.evaluate.vectorsim import BEYOND
    from poptune.store.front import FrontRow, candidates, nondominated

    rows = [FrontRow(trial=i, config=PopConfig(skip=1 + i), method="pop", speedup=float(speeds[i, study]),
                     drop=float(drop[study]), feasible=True,
                     values={"ttft": 100.0 / float(speeds[i, study]), "accuracy": 0.7 - float(drop[study]) / 100})
            for i, (verdicts, _, drop, _) in enumerate(searched) if verdicts[study] != BEYOND]
    ordered = candidates(nondominated(rows), scenario.budget, len(rows))
    if not ordered:
        return None
    first = ordered[0].trial
    plan = plans(int(searched[first][1][study]), int(searched[first][3][study]))
    if plan.per_task >= plan.needed:
        return first, plan, False
    for row in ordered[1:]:
        other = plans(int(searched[row.trial][1][study]), int(searched[row.trial][3][study]))
        if other.per_task >= other.needed:
            return row.trial, other, True
    return first, plan, False


def simulate_pipelines(scenario: PipelineScenario, *, pipelines: int, seed: int) -> PipelineRow:
    """``pipelines`` seeded studies of ``scenario`` (module docstring), what they ended with."""
    import numpy as np

    from poptune.evaluate.vectorsim import WITHIN, decide
    from poptune.evaluate.workload import rounds
    from poptune.tune.certify import CERTIFY_START, attempt_error

    rng = np.random.default_rng(seed)
    searched = _search(scenario, rng, pipelines)
    speeds = np.array([t.speedup for t in scenario.configs])[:, None] * np.exp(
        rng.normal(0.0, scenario.speed_noise, (len(scenario.configs), pipelines)))
    alpha = attempt_error(1)  # one candidate: the attempt's whole one-sided error
    plans = _Plans(scenario, 1 - 2 * alpha)
    chosen = [_select(scenario, searched, speeds, s, plans) for s in range(pipelines)]
    groups: dict[tuple[int, bool, int], list[int]] = {}
    for study, pick in enumerate(chosen):
        if pick is not None:
            index, plan, _ = pick
            groups.setdefault((plan.per_task, plan.per_task >= plan.needed, index), []).append(study)
    verdict = np.zeros(pipelines, dtype=np.int8)
    for (cap, futility, index), studies in sorted(groups.items()):
        drawn = _scenario(scenario.configs[index]).draw(rng, (scenario.tasks, len(studies), cap))
        verdict[studies], _ = decide(drawn, np.array([-1.0, 0.0, 1.0]), rounds(min(CERTIFY_START, cap), cap), alpha,
                                     scenario.budget, futility=futility)
    raw = [float(searched[p[0]][3][s] / (searched[p[0]][1][s] * scenario.tasks)) if p else 0.0
           for s, p in enumerate(chosen)]
    return _tally(scenario, chosen, verdict == WITHIN, raw)


def _tally(scenario: PipelineScenario, chosen: list[tuple[int, Any, bool] | None], within: Any,
           raw: list[float]) -> PipelineRow:
    counts = dict.fromkeys(("within", "wrong", "right", "zero", "zero_within", "planned", "passed"), 0)
    promised = seen = true = 0.0
    at_zero: dict[tuple[float, bool], tuple[int, int, float]] = {}
    for study, pick in enumerate(chosen):
        if pick is None:
            continue
        index, plan, passed = pick
        truth, yes = scenario.configs[index], bool(within[study])
        counts["within"] += yes
        counts["wrong"] += yes and truth.drop >= scenario.budget
        counts["right"] += yes and truth.drop < scenario.budget
        counts["planned"] += plan.per_task
        counts["passed"] += passed
        seen, true = seen + plan.flip_rate, true + truth.flips
        if truth.drop == 0:
            counts["zero"] += 1
            counts["zero_within"] += yes
            bought = plan.per_task >= plan.needed
            promised += plan.power if bought else plan.chance
            n, k, said = at_zero.get((truth.flips, bought), (0, 0, 0.0))
            at_zero[(truth.flips, bought)] = (n + 1, k + yes, said + (plan.power if bought else plan.chance))
    return PipelineRow(len(chosen), sum(p is not None for p in chosen), counts["within"], counts["wrong"],
                       counts["right"], counts["zero"], counts["zero_within"], promised, seen, sum(raw), true,
                       counts["planned"], counts["passed"], at_zero)


@dataclass(frozen=True)
class F1Grades:
    """F1-like grades on a 0.05 grid: the full model's grade is 0 with probability ``zero``, 1 with ``one``, else
    uniform over 0.05-0.95; the candidate's is the same grade, or with probability ``changed`` an independent one
    from the same mixture (so the true drop is 0)."""

    label: str
    zero: float
    one: float
    changed: float

    def marginal(self) -> Any:
        import numpy as np

        p = np.full(21, (1 - self.zero - self.one) / 19)
        p[0], p[20] = self.zero, self.one
        return p

    def differences(self) -> Any:
        """The paired differences' law (full minus candidate) as a :class:`~poptune.evaluate.vectorsim.GridScenario`."""
        import numpy as np

        from poptune.evaluate.vectorsim import GridScenario

        p = self.marginal()
        law = self.changed * np.convolve(p, p[::-1])  # index k: difference (k - 20) / 20
        law[20] += 1 - self.changed
        return GridScenario(self.label, tuple(round((k - 20) / 20, 2) for k in range(41)), tuple(law))

    def draw(self, rng: Any, size: int) -> tuple[Any, Any]:
        """``size`` items' (full, candidate) grades."""
        p = self.marginal()
        full = rng.choice(21, size=size, p=p)
        other = rng.choice(21, size=size, p=p)
        mine = rng.random(size) < self.changed
        return full / 20, (full * ~mine + other * mine) / 20


def _accuracy_cost(full: Any, mine: Any, confidence: float, budget: float) -> dict[str, Any]:
    """:func:`poptune.tune.certify.accuracy_cost` of one task's graded items (a likelihood run's as it stores them)."""
    from poptune.evaluate.suite import LIKELIHOOD_ITEMS
    from poptune.tune.certify import accuracy_cost

    rows = {str(i): {"correct": float(c), "full_correct": float(f)} for i, (f, c) in enumerate(zip(full, mine))}
    run = types.SimpleNamespace(details={LIKELIHOOD_ITEMS: {"longctx_squad": rows}})
    problem = types.SimpleNamespace(max_drop=budget, certify_limit=512)
    cost = accuracy_cost(run, 1.0, problem, confidence)  # type: ignore[arg-type]  # the two fields it reads
    assert cost is not None
    return cost


def accuracy_cost_power(grades: F1Grades, *, graded: int, replicates: int, races: int, seed: int,
                        confidence: float = 0.975, budget: float = 2.0) -> tuple[list[int], float]:
    """How often an accuracy verdict sized by :func:`poptune.tune.certify.accuracy_cost` certifies ``budget`` at
    true drop 0: ``replicates`` likelihood runs each grade ``graded`` fresh items (``grades``), the cost sizes an
    accuracy certification from them (one task, at ``confidence``), and ``races`` seeded races of that size
    (rounds from 32 items doubling to it, futility stop on, as a ``--certify N`` run races) on new items of the
    same grades. Returns the sizes (items) and the share of all races certified within."""
    import numpy as np

    from poptune.evaluate.vectorsim import WITHIN, decide
    from poptune.evaluate.workload import rounds

    rng = np.random.default_rng(seed)
    sizes = [int(_accuracy_cost(*grades.draw(rng, graded), confidence, budget)["items"]) for _ in range(replicates)]
    law = grades.differences()
    within = 0
    for size in sorted(set(sizes)):
        count = races * sizes.count(size)
        verdicts, _ = decide(law.draw(rng, (1, count, size)), np.asarray(law.values), rounds(min(32, size), size),
                             (1 - confidence) / 2, budget, futility=True)
        within += int((verdicts == WITHIN).sum())
    return sizes, within / (races * replicates)
