"""Certification: the front's candidates decided on items that no trial of the study has scored.

A search ranks many noisy configurations on the same items and keeps the best-looking: the winner of a
selection looks better than it is (winner's curse), so a front row's drop measured on the items that selected
it is biased low and its interval is not a verdict. After the search, :func:`certify_front` takes the front's
candidates -- the fastest POP rows not rejected by the search (drop's lower end within the budget) whose drop so
far is within the budget, at most ``problem.certify_candidates`` of them -- and races each on **fresh items**:
the items of every task's fixed order after the search's cap, which no trial has scored (the full model scores
them once, shared by every candidate). Rounds of 32 items per task double up to ``problem.certify_limit``,
until the drop's interval is decided.

**What a verdict guarantees.** The interval is the score test's repeated bounds over the certification's
planned rounds (:mod:`poptune.evaluate.paired`). The error of a wrong "certified within", :data:`ERROR` (2.5%),
is spent across the study's attempts -- the k-th certification of a study (a later ``--certify N`` above the
last cap) gets ``ERROR / 2**k`` (:func:`attempt_error`) -- and within an attempt across its K candidates
(Bonferroni): every verdict the study ever prints holds together, so "certified within" is wrong with
probability at most 2.5% when a candidate's true drop equals the budget, whichever candidate and attempt it is
and however many rounds were looked at. Asking again until the answer is yes cannot buy a verdict. A
candidate that the cap leaves undecided is said to be so (``undecided at N items``), never rounded to a
verdict. Candidates are certified fastest first; once one is certified within, the slower ones are not needed
for the fastest configuration within the budget and are left ``not certified``.

**What a decision costs.** Every raced candidate also gets the items a verdict within the budget would need
at the flip rate it showed (search and fresh items together), their minutes at the seconds per fresh item
measured here, and the smallest budget the planned items could certify
(:func:`poptune.evaluate.racing.verdict_cost`), so an undecided row says what deciding it takes.

The result is the study attribute ``certification`` (read by :func:`poptune.store.front.certified`): the
confidence, the fresh items' first position, and per candidate its configuration, trial, verdict, drop with
its interval and items, seconds and cost. A study certified again (``--certify N`` above the last cap, or a
resumed run) keeps the earlier attempts under ``attempts``, each with the error it spent.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from poptune import progress, store
from poptune.store.front import FrontRow
from poptune.store.front import candidates as front_candidates
from poptune.tune.objective import store_full_run
from poptune.tune.trust import now

if TYPE_CHECKING:
    import optuna

    from poptune.evaluate.racing import RacingPolicy
    from poptune.problem.evaluator import ConfigEvaluator
    from poptune.problem.problem import TuningProblem

__all__ = ["CERTIFY_START", "ERROR", "WITHIN", "BEYOND", "attempt_error", "candidates", "certification_policy",
           "certify_front", "spent_error", "verdict_of", "wants_certification"]

#: Items per task in a certification's first round (rounds double up to the cap).
CERTIFY_START = 32

#: The most often any certification of a study says "certified within" for a candidate whose true drop is
#: the budget: split across attempts (:func:`attempt_error`) and candidates.
ERROR = 0.025

WITHIN = "certified within"
BEYOND = "certified beyond"


def verdict_of(stopped: str, items: int) -> str:
    """A certification's verdict from how its race stopped (``items``: fresh items scored, all tasks)."""
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


def _confidence(attempt: int, candidates: int) -> float:
    """Two-sided confidence of each candidate's interval: its share of the attempt's one-sided error."""
    return 1 - 2 * attempt_error(attempt) / max(candidates, 1)


def certification_policy(problem: "TuningProblem") -> "RacingPolicy":
    """The certification's rounds: :data:`CERTIFY_START` fresh items per task, doubling up to the problem's cap."""
    from poptune.evaluate.racing import RacingPolicy

    return RacingPolicy(start=min(CERTIFY_START, problem.certify_limit), cap=problem.certify_limit)


def wants_certification(study: "optuna.Study", problem: "TuningProblem") -> bool:
    """Whether ``problem`` asks for more certification than ``study`` holds (none yet, or a larger cap)."""
    record = store.StoredStudy.of(study).certification
    return problem.certifies and (not record or int(record.get("cap", 0)) < problem.certify_limit)


def _cost(searched: dict[str, Any] | None, drop: Any, seconds: float, problem: "TuningProblem",
          confidence: float) -> dict[str, Any] | None:
    """What a verdict within the budget would cost a candidate (module docstring) in the study's next attempt,
    at that attempt's ``confidence``: ``searched``, its search drop as stored; ``drop`` and ``seconds``, its
    certification's. None for a budget of 0 points, which no number of items certifies while any item could
    flip."""
    from poptune.evaluate.paired import PairedDrop
    from poptune.evaluate.racing import verdict_cost

    if not problem.max_drop:
        return None
    before = PairedDrop.from_dict(searched) if searched else None
    items = {t: n + (before.items.get(t, 0) if before else 0) for t, n in drop.items.items()}
    flipped = {t: n + (before.flipped.get(t, 0) if before else 0) for t, n in drop.flipped.items()}
    seen = PairedDrop(0.0, 0.0, 0.0, items, flipped)  # counts only: the flip rate over every item it was scored on
    cost = verdict_cost(seen, problem.max_drop, planned=problem.certify_limit,
                        start=min(CERTIFY_START, problem.certify_limit), confidence=confidence)
    per_item = seconds / max(drop.total, 1)
    return {"flip_rate": cost.flip_rate, "items": cost.items, "per_task": cost.per_task,
            "seconds_per_item": per_item, "minutes": cost.items * per_item / 60,
            "smallest_budget": cost.smallest_budget, "power": cost.power}


def certify_front(study: "optuna.Study", evaluator: "ConfigEvaluator") -> dict[str, Any]:
    """Certify the front's candidates on fresh items and store the verdicts (module docstring); returns them."""
    p = evaluator.problem
    if not p.certifies:
        return {}
    rows = candidates(study, p.max_drop, p.certify_candidates)
    fresh = p.racing().cap
    before = store.StoredStudy.of(study).certification
    attempts = [*before.get("attempts", []), {k: v for k, v in before.items() if k != "attempts"}] if before else []
    attempt = len(attempts) + 1
    confidence = _confidence(attempt, len(rows))
    record: dict[str, Any] = {"date": now(), "confidence": confidence, "fresh_from": fresh,
                              "cap": p.certify_limit, "max_drop": p.max_drop, "candidates": [],
                              "attempt": attempt, "error": attempt_error(attempt), "attempts": attempts}
    policy = certification_policy(p)
    certified = False
    for row in rows:
        entry: dict[str, Any] = {"trial": row.trial, "config": row.config.to_dict(), "label": row.label}
        if certified:
            entry["verdict"] = "not certified"
        else:
            started = time.monotonic()
            with progress.phase(f"certifying {row.label} on fresh items", unit="round"):
                result = evaluator.race_accuracy(row.config, fresh=fresh, policy=policy, confidence=confidence)
            items = sum(result.drop.items.values())
            scores = result.run.primary() if result.run is not None else {}  # its own, on the fresh items
            seconds = time.monotonic() - started
            searched = study.trials[row.trial].user_attrs.get("drop")
            entry.update(verdict=verdict_of(result.stopped, items), drop=result.drop.to_dict(), items=items,
                         accuracy=sum(scores.values()) / len(scores) if scores else None,
                         seconds=round(seconds, 1),
                         cost=_cost(searched, result.drop, seconds, p, _confidence(attempt + 1, len(rows))))
            certified = entry["verdict"] == WITHIN
        record["candidates"].append(entry)
    store.StoredStudy.of(study).set_certification(record)
    store_full_run(study, evaluator)  # the fresh items' full-model outcomes, for a later run
    return record
