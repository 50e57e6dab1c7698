"""Certification: the front's candidates decided on items that no trial of the study has scored.

A search ranks many noisy configurations on the same items and keeps the best-looking: the winner of a
selection looks better than it is (winner's curse), so a front row's drop measured on the items that selected
it is biased low and its interval is not a verdict. After the search, :func:`certify_front` takes the front's
candidates -- the fastest POP rows not rejected by the search (drop's lower end within the budget) whose drop so
far is within the budget, at most ``problem.certify_candidates`` of them -- and races each on **fresh items**:
the items of every task's fixed order after the search's cap, which no trial has scored (the full model scores
them once, shared by every candidate). Rounds of 32 items per task double up to ``problem.certify_limit``,
until the drop's interval is decided.

**What a verdict guarantees.** The interval is the score test's repeated bounds over the certification's planned
rounds (:mod:`poptune.evaluate.paired`). The error of a wrong "certified within", :data:`ERROR` (2.5%), is spent
across the study's attempts -- the k-th certification of a study (a later ``--certify N`` past the positions earlier
attempts took) gets ``ERROR / 2**k`` (:func:`attempt_error`) -- and within an attempt across its K candidates
(Bonferroni). **Each attempt scores new items**: attempt k races only the fresh positions after attempt k-1's cap
(:func:`attempt_items`; ``--certify N`` counts fresh positions per task in all, so attempt k gets ``N`` minus the
positions earlier attempts took), so its test is valid at its own level whatever its size was chosen from (earlier
attempts' outcomes, the cost line, a hand-picked N). Every verdict the study ever prints then holds together:
"certified within" is wrong with probability at most 2.5% when a candidate's true drop equals the budget, whichever
candidate and attempt it is and however many rounds were looked at, and asking again until the answer is yes cannot
buy a verdict (:func:`poptune.tune.simulate.follow_up` simulates the two-attempt path). Attempts stored before issue
58 re-raced the same positions; their records say so by ``fresh_from``. A candidate that the cap leaves undecided is
said to be so (``undecided at N items``), never rounded to a verdict. Candidates are certified fastest first; once
one is certified within, the slower ones are not needed for the fastest configuration within the budget and are left
``not certified``.

**What a decision costs.** Every raced candidate also gets the items a verdict within the budget would need
at the flip rate it showed (search and fresh items together), their minutes at the seconds per fresh item
measured here, and the smallest budget the planned items could certify
(:func:`poptune.evaluate.racing.verdict_cost`), so an undecided row says what deciding it takes.

The result is the study attribute ``certification`` (read by :func:`poptune.store.front.certified`): the
confidence, the fresh items' first position, and per candidate its configuration, trial, verdict, drop with
its interval and items, seconds and cost. A study certified again (``--certify N`` past the positions taken, or
a resumed run) keeps the earlier attempts under ``attempts``, each with the error it spent.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from poptune import progress, store
from poptune.evaluate.judges import LIKELIHOOD_JUDGE
from poptune.interval import Interval
from poptune.store.front import FrontRow
from poptune.store.front import candidates as front_candidates
from poptune.tune.objective import store_full_run
from poptune.tune.trust import now

if TYPE_CHECKING:
    import optuna

    from poptune.evaluate.paired import PairedDrop
    from poptune.evaluate.racing import RacingPolicy
    from poptune.problem.evaluator import ConfigEvaluator
    from poptune.problem.problem import TuningProblem

__all__ = ["CERTIFY_START", "CLOSING_S", "CertificationPlan", "ERROR", "PLAN_SIMULATED", "WITHIN", "BEYOND",
           "Repricing", "accuracy_cost", "accuracy_drop", "attempt_error", "attempt_items", "candidates",
           "certification_policy", "certify_front", "check_follow_up", "plan_certification", "spent_error",
           "verdict_of", "wants_certification"]

#: Items per task in a certification's first round (rounds double up to the cap).
CERTIFY_START = 32

#: Seconds a planned certification leaves before the run's deadline for the closing A/A check and the report
#: (at least: a study keeps its opening A/A check's seconds where longer, :func:`poptune.tune.study._finish`).
CLOSING_S = 45.0

#: The most often any certification of a study says "certified within" for a candidate whose true drop is
#: the budget: split across attempts (:func:`attempt_error`) and candidates.
ERROR = 0.025

#: What a plan that buys its verdict's items is worth in whole studies simulated (``benchmarks/pipeline_errors.py``,
#: :mod:`poptune.tune.pipelinesim`: eight configurations of 0/1 items, the search, the selection, this plan, the
#: certification; ``leaderboards/decision-errors-simulated-cpu-amd-epyc-2t.md``): the candidate the search selects
#: showed fewer flips than it has, so its true-drop-0 certification came out 79.8-81.5% where the eight flip alike
#: (4.5-5%), 86.9% down to 59.6% for candidates flipping 3.7% to 10% among configurations that flip differently, and
#: 42.1% where a clock's 372 items per task bought the verdict only for candidates that had shown few flips.
PLAN_SIMULATED = ("the search's few items understate the selected candidate's flips: simulated studies certify "
                  "42-87% of such candidates")

WITHIN = "certified within"
BEYOND = "certified beyond"


def verdict_of(stopped: str, items: int) -> str:
    """A certification's verdict from how its race stopped (``items``: fresh items scored, all tasks)."""
    if stopped == "futile":  # a non-binding stop: the bound could no longer reach the budget by the cap
        return f"undecided at {items} items (stopped: a verdict within the budget was out of reach by the cap)"
    return {"within budget": WITHIN, "beyond budget": BEYOND}.get(stopped, f"undecided at {items} items")


def candidates(study: "optuna.Study", max_drop: float | None, count: int) -> list[FrontRow]:
    """The front's POP rows worth certifying: not the full model, drop so far within ``max_drop``, fastest first."""
    return front_candidates(store.front(study), max_drop, count)


def attempt_error(attempt: int) -> float:
    """The error the ``attempt``-th certification of a study (1, 2, ...) may spend: ``ERROR / 2**attempt``, so
    the attempts together never spend more than :data:`ERROR`."""
    if attempt < 1:
        raise ValueError(f"attempts count from 1, got {attempt}")
    return ERROR / 2 ** attempt


def spent_error(record: dict[str, Any] | None) -> float:
    """The error a study's certifications have spent, every attempt together (records stored before attempts
    shared the error spent all of it)."""
    if not record:
        return 0.0
    return sum(float(a.get("error", ERROR)) for a in [*record.get("attempts", []), record])


def attempt_items(before: dict[str, Any] | None, search_cap: int, limit: int) -> tuple[int, int]:
    """Where the next attempt's fresh items start and how many per task it may take: the positions after the
    last attempt's cap (``before``: the study's certification record, None for none), up to ``limit`` fresh
    positions per task in all (``--certify N``). Raises ConfigError when earlier attempts took them all."""
    from poptune.errors import ConfigError

    taken = _taken(before, search_cap)
    if limit - taken < 1:
        raise ConfigError(f"--certify {limit}: earlier certifications took the first {taken} fresh items "
                          "per task, and a new attempt scores only items none of them saw: ask for more")
    return search_cap + taken, limit - taken


def _taken(before: dict[str, Any] | None, search_cap: int) -> int:
    """Fresh positions per task the attempts of ``before`` (a certification record, None for none) took: up to
    the last one's cap, from its first position (the search's cap for records stored without it)."""
    if not before:
        return 0
    return int(before.get("fresh_from", search_cap)) + int(before.get("cap", before.get("limit", 0))) - search_cap


def _confidence(attempt: int, candidates: int) -> float:
    """Two-sided confidence of each candidate's interval: its share of the attempt's one-sided error."""
    return 1 - 2 * attempt_error(attempt) / max(candidates, 1)


def certification_policy(problem: "TuningProblem") -> "RacingPolicy":
    """The certification's rounds: :data:`CERTIFY_START` fresh items per task, doubling up to the problem's cap."""
    from poptune.evaluate.racing import RacingPolicy

    return RacingPolicy(start=min(CERTIFY_START, problem.certify_limit), cap=problem.certify_limit)


def wants_certification(study: "optuna.Study", problem: "TuningProblem") -> bool:
    """Whether ``problem`` asks for a certification ``study`` has not had: none yet, or another ``--certify N``
    than the last attempt was given with fresh positions beyond those the attempts took (:func:`attempt_items`).
    ``N`` counts those positions, so the cost line's ``--certify N`` after a planned attempt that chose fewer items
    than the preset's cap is a follow-up though below that cap; the same ``N`` again is not asked again."""
    record = store.StoredStudy.of(study).certification
    if not problem.certifies or not record:
        return problem.certifies
    return _limit(record) != problem.certify_limit and problem.certify_limit > _taken(record, problem.racing().cap)


def check_follow_up(study: "optuna.Study", problem: "TuningProblem") -> None:
    """Refuse, in one line, a ``--certify N`` other than the last attempt's that leaves no fresh position past
    those the attempts took (:func:`attempt_items`'s ``ConfigError``): a new attempt scores only items no attempt
    saw. The same ``N`` again, or none, passes (the study is reported as it is)."""
    record = store.StoredStudy.of(study).certification
    if problem.certifies and record and _limit(record) != problem.certify_limit:
        attempt_items(record, problem.racing().cap, problem.certify_limit)


def _limit(record: dict[str, Any]) -> int:
    """The ``--certify N`` an attempt was given (its cap, for records stored before limits were)."""
    return int(record.get("limit", record.get("cap", 0)))


@dataclass(frozen=True)
class CertificationPlan:
    """What a certification will spend and why, said before it spends (:func:`plan_certification`).

    Attributes:
        per_task: Fresh items per task the race may score (its cap).
        tasks: Tasks scored.
        needed: Items per task for the verdict within the budget with probability ``power`` at ``flip_rate``,
            true drop 0 (:func:`poptune.evaluate.racing.verdict_cost`).
        affordable: Items per task the time left buys (None: no clock, or no cost per item measured yet).
        supply: Items per task the problem holds for certification (its cap).
        flip_rate: The share of the candidate's search items that flipped (one added, so none is not 0); under
            the likelihood judge, the mean squared change of an item's outcome (:attr:`PairedDrop.flip_mass`,
            :func:`poptune.evaluate.racing.planning_rate`).
        seconds_per_item: What an item costs the full model and the candidate together (None: not measured).
        smallest_budget: The smallest budget ``per_task`` items certify with probability ``power`` at that rate.
        power: The probability the sizes are for.
        squared: Whether ``flip_rate`` rests on the squared moves (False: a search drop stored without them, whose
            absolute moves stand in).
        chance: The probability that ``per_task`` items per task certify the budget at true drop 0 and that rate
            (:attr:`poptune.evaluate.racing.VerdictCost.chance`): what the items the plan can buy are worth.
    """

    per_task: int
    tasks: int
    needed: int
    affordable: int | None
    supply: int
    flip_rate: float
    seconds_per_item: float | None
    smallest_budget: float
    power: float = 0.8
    squared: bool = True
    chance: float = 0.0

    @property
    def minutes(self) -> float | None:
        return None if self.seconds_per_item is None else self.per_task * self.tasks * self.seconds_per_item / 60

    def line(self, label: str, budget: float, judge: str = "accuracy") -> str:
        """``certifying 5/window-64/0 on N fresh items (~M min): ...``: the plan, in one line (``judge``
        ``likelihood``: the verdict is the likelihood's, and it says so)."""
        cost = f" (~{self.minutes:.0f} min)" if self.minutes is not None else ""
        kind = "likelihood " if judge == LIKELIHOOD_JUDGE else ""
        head = f"certifying {label} on {self.per_task * self.tasks:,} fresh items{cost}"
        rate = f"items flip at the {100 * self.flip_rate:.1f}% flip rate the search saw" if not kind else \
            f"items move by {100 * math.sqrt(self.flip_rate):.1f} points (root mean square) as the search saw" \
            if self.squared else f"items move by {100 * self.flip_rate:.1f} points on average as the search saw"
        if self.per_task >= self.needed:
            simulated = "" if kind else f" ({PLAN_SIMULATED})"
            return (f"{head}: {100 * self.power:.0f}% power for a {budget:g}-point {kind}verdict if the true drop "
                    f"is 0 and {rate}{simulated}")
        why = "all the time budget buys" if self.affordable is not None and self.affordable < self.supply \
            else "all the certification's cap holds"
        return (f"{head}, {why}: a {budget:g}-point {kind}verdict needs about {self.needed * self.tasks:,} if the "
                f"true drop is 0 and {rate}; these items certify about {self.smallest_budget:.1f} points "
                f"as often ({100 * self.power:.0f}%), {budget:g} points {100 * self.chance:.0f}% of the time"
                f"{self._longer()}")

    def _longer(self) -> str:
        """Where the clock, not the cap, falls short: how much longer a time budget buys the verdict's items."""
        if self.affordable is None or not self.affordable < self.needed <= self.supply or not self.seconds_per_item:
            return ""
        minutes = (self.needed - self.per_task) * self.tasks * self.seconds_per_item / 60
        return f"; about {math.ceil(minutes)} more minutes of --time-budget buy the {self.needed * self.tasks:,}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan_certification(study: "optuna.Study", evaluator: "ConfigEvaluator", rows: list[FrontRow],
                       confidence: float, *, deadline: float | None,
                       supply: int | None = None) -> CertificationPlan | None:
    """The certification's size: the items the first candidate's verdict needs at the flip rate its search
    items showed (true drop 0, 80% power), at most what the time left before ``deadline`` buys at the cost per
    item this process measured (keeping :data:`CLOSING_S` for the closing checks) and at most the problem's cap;
    at least one first round. The size never depends on a fresh item's outcome, so the design's error holds at
    any size it picks. ``supply``: the fresh items per task this attempt may take (default: the problem's cap;
    a later attempt's are those after the earlier attempts', :func:`attempt_items`). None without a candidate.
    :class:`Repricing` sizes it again at what its first round cost."""
    p = evaluator.problem
    if not rows or not p.max_drop:
        return None
    supply = p.certify_limit if supply is None else supply
    return _sized(_search_drop(study, rows[0], p.tasks), p.max_drop, supply, confidence,
                  evaluator.seconds_per_item(), deadline)


def _search_drop(study: "optuna.Study", row: FrontRow, tasks: Any) -> "PairedDrop":
    """The flips (and moves) ``row``'s search items showed, as a drop with no interval: what a plan sizes from."""
    from poptune.evaluate.paired import PairedDrop

    zero = {t: 0 for t in tasks}
    stored = study.trials[row.trial].user_attrs.get("drop")
    seen = PairedDrop.from_dict(stored) if stored else PairedDrop(Interval(0.0, 0.0, 0.0), zero, dict(zero))
    return PairedDrop(Interval(0.0, 0.0, 0.0), seen.items or zero, seen.flipped or dict(zero), moved=dict(seen.moved),
                      squares=dict(seen.squares))


def _sized(seen: "PairedDrop", budget: float, supply: int, confidence: float, per_item: float | None,
           deadline: float | None, taken: int = 0) -> CertificationPlan:
    """The plan for ``seen``'s flips: the verdict's items, within ``supply`` per task and what the time left
    before ``deadline`` buys at ``per_item`` seconds, beside the ``taken`` items per task already scored."""
    from poptune.evaluate.racing import verdict_cost

    start = min(CERTIFY_START, supply)
    cost = verdict_cost(seen, budget, planned=supply, start=start, confidence=confidence)
    affordable = None
    if deadline is not None and per_item:
        left = deadline - time.monotonic() - CLOSING_S
        affordable = taken + max(0, int(left / per_item / cost.tasks))
    per_task = max(start, min(supply, cost.per_task, supply if affordable is None else affordable))
    bought = verdict_cost(seen, budget, planned=per_task, start=min(start, per_task), confidence=confidence)
    return CertificationPlan(per_task, cost.tasks, cost.per_task, affordable, supply, cost.flip_rate, per_item,
                             bought.smallest_budget, cost.power, squared=bool(seen.squares), chance=bought.chance)


@dataclass
class Repricing:
    """A time-budgeted plan sized again after the certification's first round, at the seconds per item that
    round cost (:func:`poptune.evaluate.racing.race`'s ``resize``), and said in one line where the cap moves: the
    plan prices an item at the search's full-model and candidate scoring added up, while the certification shares
    the full model's trunk and scores in larger rounds (6.3 s against 4.9 s per item in a likelihood study here),
    so its first figure buys fewer items than the time holds. The round's look comes after the cap is set, but the
    round's seconds are not outcome-free (they include generating the answers, whose lengths go with what the
    answers are, and under the likelihood judge scoring them), so the re-sized cap may lean on the first round's
    outcomes through the clock: the design's error is proven for a cap fixed in advance, not for this one.

    Attributes:
        plan: The plan said before spending; ``resized``: the one the race took after its first round.
        seen, budget, confidence, deadline: What the plan was sized from (:func:`_sized`): the candidate's search
            drop, the budget in points, the interval's confidence and the run's deadline.
        label, judge: The candidate's label and the study's judge, for the line.
    """

    plan: CertificationPlan
    seen: "PairedDrop"
    budget: float
    confidence: float
    deadline: float
    label: str
    judge: str
    resized: CertificationPlan | None = None

    def __call__(self, seconds: float, items: int) -> tuple[int, bool]:
        """The cap (items per task) and whether the futility stop is on (:func:`certify_front`'s rule), after a
        first round of ``items`` items (all tasks) that took ``seconds``."""
        plan = self.plan
        new = _sized(self.seen, self.budget, plan.supply, self.confidence, seconds / max(items, 1), self.deadline,
                     taken=-(-items // plan.tasks))
        self.resized = new
        if new.per_task != plan.per_task:
            was = f"{plan.seconds_per_item:.1f}" if plan.seconds_per_item else "no figure"
            progress.note(f"re-sized at the first round's {new.seconds_per_item:.1f} s per item (planned at "
                          f"{was}): {new.line(self.label, self.budget, self.judge)}")
        return new.per_task, new.per_task >= new.needed


def _moved(drop: Any, task: str) -> tuple[float, float]:
    """How much ``drop``'s items of ``task`` moved: the sums of their absolute and of their squared differences
    (the flips, or the absolute differences' sum, standing in where it was stored without the figure)."""
    moved = float(drop.moved[task]) if task in drop.moved else float(drop.flipped.get(task, 0))
    return moved, float(drop.squares[task]) if task in drop.squares else moved


def _cost(searched: dict[str, Any] | None, drop: Any, seconds: float, problem: "TuningProblem",
          confidence: float, used: int = 0) -> dict[str, Any] | None:
    """What a verdict within the budget would cost a candidate (module docstring) in the study's next attempt,
    at that attempt's ``confidence``: ``searched``, its search drop as stored; ``drop`` and ``seconds``, its
    certification's; ``used``: fresh positions per task the attempts so far took. The next attempt scores new
    items only, so ``per_task`` is the ``--certify N`` that buys them (``used`` plus the items it needs per task)
    and ``items`` the attempt's own. A planning figure: 80% if the true drop is 0 and items flip as often as seen
    (the search's flips, biased low for the selected candidate, are counted in); ``smallest_budget``, what the
    items this attempt planned certify as often. None for a budget of 0 points, which no number of items
    certifies while any item could flip."""
    from poptune.evaluate.paired import PairedDrop

    if not problem.max_drop:
        return None
    before = PairedDrop.from_dict(searched) if searched else None
    items = {t: n + (before.items.get(t, 0) if before else 0) for t, n in drop.items.items()}
    flipped = {t: n + (before.flipped.get(t, 0) if before else 0) for t, n in drop.flipped.items()}
    sums = {t: [a + b for a, b in zip(_moved(drop, t), _moved(before, t) if before else (0.0, 0.0))]
            for t in drop.items}
    seen = PairedDrop(Interval(0.0, 0.0, 0.0), items, flipped, moved={t: s[0] for t, s in sums.items()},
                      squares={t: s[1] for t, s in sums.items()})  # counts: the rate over every item scored
    planned = -(-drop.planned // max(len(drop.items), 1)) if drop.planned else None  # this attempt's, per task
    cost, figures = _priced(seen, problem, confidence, seconds / max(drop.total, 1), planned)
    return {**figures, "per_task": used + cost.per_task, "smallest_budget": cost.smallest_budget}


def _priced(seen: Any, problem: "TuningProblem", confidence: float, per_item: float,
            planned: int | None = None) -> tuple[Any, dict[str, Any]]:
    """The verdict cost at ``seen``'s flips (:func:`poptune.evaluate.racing.verdict_cost`, the problem's budget; its
    smallest budget for ``planned`` items per task, default the problem's cap) and its figures: flip rate, items,
    their minutes at ``per_item`` seconds, power."""
    from poptune.evaluate.racing import verdict_cost

    assert problem.max_drop  # a cost is priced for a budget
    planned = planned or problem.certify_limit
    cost = verdict_cost(seen, problem.max_drop, planned=planned, start=min(CERTIFY_START, planned),
                        confidence=confidence)
    return cost, {"flip_rate": cost.flip_rate, "rms_points": 100 * math.sqrt(cost.flip_rate), "items": cost.items,
                  "seconds_per_item": per_item, "minutes": cost.items * per_item / 60, "power": cost.power}


def accuracy_cost(run: Any, seconds: float, problem: "TuningProblem", confidence: float) -> dict[str, Any] | None:
    """Under the likelihood judge, what an accuracy verdict on the same tasks would cost: the candidate's fresh
    items each carry its answer's and the full model's grade by the task's own metric
    (:func:`poptune.evaluate.answers.score_requests`), so the share whose grade changed is the accuracy judge's flip
    rate on these very items; the items a verdict within the budget needs at it (sized for 80% power, true drop 0,
    as :func:`_cost`, by the normal approximation's stand-in for a continuous outcome: seeded races of F1-like grades
    of that size certify 75-80% of the time, :func:`poptune.tune.pipelinesim.accuracy_cost_power`) and their minutes
    at the seconds per item this certification spent (an accuracy item costs the same generation, without the
    teacher-forced scoring). None without graded items or a budget."""
    graded = _graded(run)
    if not graded or not problem.max_drop:
        return None
    seen = _graded_drop(graded)  # flips and how much moved
    _, figures = _priced(seen, problem, confidence, seconds / seen.total)
    return {"graded": seen.total, "flipped": sum(seen.flipped.values()), **figures}


def _graded(run: Any) -> dict[str, list[dict[str, Any]]]:
    """Per task, the figures of a likelihood run's items graded by the task's own metric on both sides."""
    from poptune.evaluate.suite import LIKELIHOOD_ITEMS

    rows = (run.details.get(LIKELIHOOD_ITEMS) if run is not None else None) or {}
    graded = {task: [f for f in figures.values() if "correct" in f and "full_correct" in f]
              for task, figures in rows.items()}
    return {task: found for task, found in graded.items() if found}


def _graded_drop(graded: dict[str, list[dict[str, Any]]]) -> "PairedDrop":
    """The paired drop of the tasks' own metric on ``graded``'s items: one look at 95% (a fixed-size interval)."""
    from poptune.evaluate.paired import paired_drop

    return paired_drop({t: [f["full_correct"] for f in found] for t, found in graded.items()},
                       {t: [f["correct"] for f in found] for t, found in graded.items()})


def accuracy_drop(run: Any) -> dict[str, Any] | None:
    """Under the likelihood judge, the accuracy it did not judge, on the very items it judged: the paired drop of
    the tasks' own metric (the grades each fresh item carries, :func:`accuracy_cost`) with its own paired interval
    (the score test at 95%, one look: a continuous metric such as F1 by its empirical-likelihood fit,
    :mod:`poptune.evaluate.paired`), and how many of those items' answers changed (not token for token the full
    model's). Reported, never certified: the certification's looks and level are the likelihood's. None without
    graded items."""
    graded = _graded(run)
    if not graded:
        return None
    drop = _graded_drop(graded)
    answered = [f for found in graded.values() for f in found if "unchanged" in f]
    return {"drop": drop.to_dict(), "items": drop.total, "answers": len(answered),
            "changed": sum(1 for f in answered if not f["unchanged"])}


def certify_front(study: "optuna.Study", evaluator: "ConfigEvaluator", *, planned: bool = False,
                  deadline: float | None = None) -> dict[str, Any]:
    """Certify the front's candidates on fresh items and store the verdicts (module docstring); returns them.

    Args:
        planned: Size the certification (:func:`plan_certification`): the items a verdict needs at the search's
            flip rate, within what the time left buys and the problem's cap; otherwise the problem's cap.
        deadline: When the run must be done (``time.monotonic()`` seconds; None: no clock).
    """
    p = evaluator.problem
    if not p.certifies:
        return {}
    rows = candidates(study, p.max_drop, p.certify_candidates)
    before = store.StoredStudy.of(study).certification
    fresh, room = attempt_items(before, p.racing().cap, p.certify_limit)  # new items only, after the last attempt
    attempts = [*before.get("attempts", []), {k: v for k, v in before.items() if k != "attempts"}] if before else []
    attempt = len(attempts) + 1
    confidence = _confidence(attempt, len(rows))
    plan = plan_certification(study, evaluator, rows, confidence, deadline=deadline, supply=room) \
        if planned else None
    passed = None
    if plan is not None and plan.per_task < plan.needed and p.certify_candidates == 1:
        rows, plan, passed = _decidable(study, evaluator, rows, plan, confidence, deadline, room)
    cap = plan.per_task if plan is not None else room
    record: dict[str, Any] = {"date": now(), "confidence": confidence, "fresh_from": fresh,
                              "cap": cap, "limit": p.certify_limit, "max_drop": p.max_drop, "candidates": [],
                              "attempt": attempt, "error": attempt_error(attempt), "attempts": attempts,
                              "plan": plan.to_dict() if plan is not None else None}
    if passed is not None:
        record["passed_over"] = passed
        progress.note(passed["line"])
    if plan is not None:
        assert p.max_drop is not None  # a plan is made for a budget
        progress.note(plan.line(rows[0].label, p.max_drop, p.judge))
    policy = replace(certification_policy(p), start=min(CERTIFY_START, cap), cap=cap)
    # A plan that buys fewer items than the verdict needs spends them all for the bound it said they certify: no
    # futility stop there (below the fewest items any outcome certifies the budget on, a race is futile by the
    # cap's reckoning from its first look, whatever its items show).
    futility = plan is None or plan.per_task >= plan.needed
    repricing = None
    if plan is not None and deadline is not None and plan.affordable is not None and len(rows) == 1:
        assert p.max_drop is not None  # a plan is made for a budget
        repricing = Repricing(plan, _search_drop(study, rows[0], p.tasks), p.max_drop, confidence, deadline,
                              rows[0].label, p.judge)
    with evaluator.sharing([row.config for row in rows]):  # the full model's items score every candidate too
        record["candidates"] = _race_candidates(study, evaluator, rows, fresh, policy, attempt,
                                                fresh - p.racing().cap + cap, futility, repricing)
    if repricing is not None and repricing.resized is not None:
        record.update(cap=repricing.resized.per_task, resized=repricing.resized.to_dict())
    store.StoredStudy.of(study).set_certification(record)
    store_full_run(study, evaluator)  # the fresh items' full-model outcomes, for a later run
    return record


def _decidable(study: "optuna.Study", evaluator: "ConfigEvaluator", rows: list[FrontRow],
               plan: CertificationPlan, confidence: float, deadline: float | None,
               supply: int) -> tuple[list[FrontRow], CertificationPlan, dict[str, Any] | None]:
    """Where the time or the cap cannot buy the fastest candidate's verdict: the fastest slower candidate whose
    verdict they buy (its plan, from its own search items' flips), and what passing over the fastest says;
    else the fastest as it was (None). Which candidate is certified is chosen from the search's items only, never
    a fresh one, so the certification's error holds whichever it is."""
    p = evaluator.problem
    front = store.front(study)
    for row in front_candidates(front, p.max_drop, len(front))[1:]:
        other = plan_certification(study, evaluator, [row], confidence, deadline=deadline, supply=supply)
        if other is not None and other.per_task >= other.needed:
            first = rows[0]
            cost = f" (~{plan.needed * plan.tasks * plan.seconds_per_item / 60:.0f} min)" \
                if plan.seconds_per_item else ""
            short = "the time budget buys" if plan.affordable is not None and plan.affordable < plan.supply \
                else "the certification holds"
            line = (f"{first.label} ({first.speedup:.2f}x) needs about {plan.needed * plan.tasks:,} fresh items for "
                    f"its verdict{cost}, more than {short}: certifying {row.label} ({row.speedup:.2f}x), the "
                    f"fastest candidate whose verdict they buy (--certify N or --time-budget for {first.label})")
            return [row], other, {"trial": first.trial, "label": first.label, "plan": plan.to_dict(), "line": line}
    return rows, plan, None


def _race_candidates(study: "optuna.Study", evaluator: "ConfigEvaluator", rows: list[FrontRow], fresh: int,
                     policy: "RacingPolicy", attempt: int, used: int, futility: bool = True,
                     repricing: Repricing | None = None) -> list[dict[str, Any]]:
    """Each candidate raced on the fresh items, fastest first, until one is certified within the budget
    (``used``: fresh positions per task taken once this attempt is done at ``policy``'s cap; ``futility``: the
    races' futility stop, :func:`poptune.evaluate.racing.race`; ``repricing``: a single candidate's cap sized
    again after its first round)."""
    p = evaluator.problem
    confidence = _confidence(attempt, len(rows))
    entries: list[dict[str, Any]] = []
    certified = False
    for row in rows:
        entry: dict[str, Any] = {"trial": row.trial, "config": row.config.to_dict(), "label": row.label}
        if certified:
            entry["verdict"] = "not certified"
        else:
            started = time.monotonic()
            with progress.phase(f"certifying {row.label} on fresh items", unit="round"):
                result = evaluator.race_accuracy(row.config, fresh=fresh, policy=policy, confidence=confidence,
                                                 futility=futility, resize=repricing)
            if repricing is not None and repricing.resized is not None:
                used += repricing.resized.per_task - policy.cap
            items = sum(result.drop.items.values())
            scores = result.run.primary() if result.run is not None else {}  # its own, on the fresh items
            seconds = time.monotonic() - started
            searched = study.trials[row.trial].user_attrs.get("drop")
            entry.update(verdict=verdict_of(result.stopped, items), drop=result.drop.to_dict(), items=items,
                         accuracy=sum(scores.values()) / len(scores) if scores else None,
                         seconds=round(seconds, 1),
                         cost=_cost(searched, result.drop, seconds, p, _confidence(attempt + 1, len(rows)), used))
            if p.judge == LIKELIHOOD_JUDGE:  # beside a likelihood verdict, the accuracy and what its verdict costs
                entry["accuracy_drop"] = accuracy_drop(result.run)
                entry["accuracy_cost"] = accuracy_cost(result.run, seconds, p, confidence)
            certified = entry["verdict"] == WITHIN
        entries.append(entry)
    return entries
