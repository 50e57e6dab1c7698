"""What an undecided verdict of the methods board would cost: items per task, minutes on the machine, the command.

A planning figure, not a claim: if the true lead were the one observed and items flipped as often as seen,
the board's interval at its per-row confidence would exclude 0 with probability ``power`` at about ``n`` items
per task. The size is the board's own test's (issue 58; the formula of
:func:`poptune.evaluate.racing.verdict_cost`, at a lead of 0 instead of a budget): one look, tasks weighted
equally as :func:`poptune.evaluate.paired.paired_drop` weighs them, the score test's **restricted** variance
under "no lead" ``V_0`` (a task's flip rate, one flip added so that none seen is not 0) and its continuity
correction of ``1 / (2 T n)``: the ``n`` with

    sqrt(n) L - 1 / (2 T sqrt(n)) = z_(1 - alpha/2) sqrt(V_0) + z_power sqrt(V_1)

``L`` the lead (a fraction), ``V_0 = sum_t f_t / T^2`` and ``V_1 = sum_t (f_t - m_t^2) / T^2`` the variance of
the mean under the lead (``m_t`` each task's mean difference). The former size used the unrestricted variance
and no correction, and planned races fell short of the power it promised. A task whose metric is not bounded
(bits per byte: a bootstrap interval) keeps the sample variance, without the correction. The minutes are the record's
own scoring times per item, every method
of the table, scaled to that size: the cost of its follow-up command, which scores **new items only**
(``--skip`` past every item the record scored, ``--items n``: issue 86; raising ``--items`` alone would re-score a
superset of the items already seen, optional stopping) and writes a **new record** beside the first under
``leaderboards/raw/`` (``<name>-from-<skip>.json``; ``poptune compare`` refuses to overwrite a record). The
follow-up's table is a test of its own, at its own level, on items its size was not chosen from; the two tables
together err at most the sum of their levels. Past :data:`MAX_ITEMS` per task no size is worth planning: the
board says so instead of a figure.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

__all__ = ["MAX_ITEMS", "Cost", "decision_cost", "follow_up", "items_to_decide"]

#: Items per task past which the board does not plan a decision (more than any task of the data holds).
MAX_ITEMS = 10_000


@dataclass(frozen=True)
class Cost:
    """Items per task a decision needs, minutes to score the whole table at that size here, and the command."""

    per_task: int
    minutes: float
    command: str


def _variances(a: Sequence[float], b: Sequence[float], lower: bool) -> tuple[float, float, bool]:
    """One item's paired difference (fractions): its variance under no lead (the score test's restricted one),
    under the lead seen, and whether the metric is bounded (else both are the sample variance)."""
    diffs = [(y - x) if lower else (x - y) for x, y in zip(a, b)]
    n = len(diffs)
    mean = sum(diffs) / n
    if not lower and all(abs(d) <= 1 + 1e-12 for d in diffs):
        flips = (sum(abs(d) for d in diffs) + 1) / (n + 2)  # losses and gains of their size, one flip added
        return flips, max(flips - mean * mean, flips / (n + 2)), True
    sample = max(sum((d - mean) ** 2 for d in diffs) / max(n - 1, 1), 1 / (n + 2))  # not read as certain
    return sample, sample, False


def items_to_decide(pop: Mapping[str, Sequence[float]], baseline: Mapping[str, Sequence[float]], lead: float,
                    confidence: float, power: float = 0.8, lower_is_better: Sequence[str] = ()) -> int | None:
    """Items per task at which a true lead of ``lead`` points is decided with probability ``power`` if items
    flip as often as seen (module docstring); None for no lead (no finite size decides it)."""
    if abs(lead) < 1e-9:
        return None
    tasks = sorted(pop)
    parts = [_variances(pop[t], baseline[t], t in lower_is_better) for t in tasks]
    null, alternative = (sum(v[i] for v in parts) / len(tasks) ** 2 for i in (0, 1))
    k = NormalDist().inv_cdf(1 - (1 - confidence) / 2) * math.sqrt(null) + \
        NormalDist().inv_cdf(power) * math.sqrt(alternative)
    size = abs(lead) / 100
    correction = 1 / len(tasks) if all(bounded for *_, bounded in parts) else 0.0  # 1 / (2 T n), T tasks
    root = (k + math.sqrt(k * k + 2 * size * correction)) / (2 * size)
    return max(1, math.ceil(root * root))


def decision_cost(record: Mapping[str, Any], pop: str, baseline: str, lead: float, confidence: float,
                  power: float = 0.8) -> Cost | None:
    """The cost of deciding ``baseline``'s row against ``pop`` (method names in ``record``) at the observed
    ``lead``: items per task, minutes to score every method of the record at that size, and the command."""
    from poptune.evaluate.suite import LOWER_IS_BETTER, PRIMARY_METRIC

    methods = {e["name"]: e for e in record["methods"]}
    lower = [t for t in record["tasks"] if PRIMARY_METRIC.get(t) in LOWER_IS_BETTER]
    per_task = items_to_decide(methods[pop]["outcomes"], methods[baseline]["outcomes"], lead, confidence, power,
                               lower)
    if per_task is None:
        return None
    tasks = len(record["tasks"])
    per_item = sum(e.get("score_seconds", 0.0) / max(sum(len(v) for v in e["outcomes"].values()), 1)
                   for e in record["methods"])
    return Cost(per_task, per_item * per_task * tasks / 60, follow_up(record, per_task))


def follow_up(record: Mapping[str, Any], per_task: int) -> str:
    """The record's command again on ``per_task`` new items per task: ``--skip`` past every item the record
    scored (its own skip plus its items per task), ``--items per_task``, and a new record beside it
    (``--out leaderboards/raw/<name>-from-<skip>.json``), never the record it was made from (module docstring)."""
    command = str(record.get("command", "") or "poptune compare")
    seen = int(record.get("skip", 0) or 0) + int(record.get("per_task", 0) or 0)
    for flag, value in (("--items", per_task), ("--skip", seen)):
        command = re.sub(rf"{flag}[ =]\d+", f"{flag} {value}", command) if re.search(rf"{flag}[ =]\d+", command) \
            else f"{command} {flag} {value}"
    name = str(record.get("_file") or "")
    stem = re.sub(r"(-from-\d+)?\.json$", "", name or re.sub(r".*--out[ =](\S+).*", r"\1", command).split("/")[-1])
    out = f"leaderboards/raw/{stem}-from-{seen}.json"
    return re.sub(r"--out[ =]\S+", f"--out {out}", command) if re.search(r"--out[ =]\S+", command) \
        else f"{command} --out {out}"
