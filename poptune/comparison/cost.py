"""What an undecided verdict of the methods board would cost: items per task, minutes on the machine, the command.

A planning figure, not a claim: if the true lead were the one observed, the board's interval at its per-row
confidence would exclude 0 with probability ``power`` at about ``n`` items per task, where (one look, the score
test's normal approximation, tasks weighted equally as :func:`poptune.evaluate.paired.paired_drop` weighs them)

    n = (z_(1 - alpha/2) + z_power)^2 * (sum_t s_t^2 / T^2) / lead^2

with ``s_t^2`` the variance of one item's paired difference in task t (points^2; at least one flip's worth, so a
task with none is not read as certain). The minutes are the record's own scoring times per item, every method
of the table, scaled to that size: the cost of running its command again with ``--items n``, written to the
record's own file under ``leaderboards/raw/``. Past :data:`MAX_ITEMS` per task no size is worth planning: the
board says so instead of a figure.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

__all__ = ["MAX_ITEMS", "Cost", "decision_cost", "items_to_decide"]

#: Items per task past which the board does not plan a decision (more than any task of the data holds).
MAX_ITEMS = 10_000


@dataclass(frozen=True)
class Cost:
    """Items per task a decision needs, minutes to score the whole table at that size here, and the command."""

    per_task: int
    minutes: float
    command: str


def _variance(a: Sequence[float], b: Sequence[float]) -> float:
    diffs = [100 * (x - y) for x, y in zip(a, b)]
    n = len(diffs)
    mean = sum(diffs) / n
    sample = sum((d - mean) ** 2 for d in diffs) / max(n - 1, 1)
    return max(sample, 100 ** 2 / (n + 2))


def items_to_decide(pop: Mapping[str, Sequence[float]], baseline: Mapping[str, Sequence[float]], lead: float,
                    confidence: float, power: float = 0.8) -> int | None:
    """Items per task at which a true lead of ``lead`` points is decided with probability ``power``; None for
    no lead (no finite size decides it)."""
    if abs(lead) < 1e-9:
        return None
    tasks = sorted(pop)
    spread = sum(_variance(pop[t], baseline[t]) for t in tasks) / len(tasks) ** 2
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2) + NormalDist().inv_cdf(power)
    return math.ceil(z * z * spread / (lead * lead))


def decision_cost(record: Mapping[str, Any], pop: str, baseline: str, lead: float, confidence: float,
                  power: float = 0.8) -> Cost | None:
    """The cost of deciding ``baseline``'s row against ``pop`` (method names in ``record``) at the observed
    ``lead``: items per task, minutes to score every method of the record at that size, and the command."""
    methods = {e["name"]: e for e in record["methods"]}
    per_task = items_to_decide(methods[pop]["outcomes"], methods[baseline]["outcomes"], lead, confidence, power)
    if per_task is None:
        return None
    tasks = len(record["tasks"])
    per_item = sum(e.get("score_seconds", 0.0) / max(sum(len(v) for v in e["outcomes"].values()), 1)
                   for e in record["methods"])
    command = record.get("command", "")
    command = re.sub(r"--items \d+", f"--items {per_task}", command) if "--items" in command else \
        f"{command} --items {per_task}".strip()
    if record.get("_file"):  # where the record is kept, whatever folder it was first written to
        command = re.sub(r"--out \S+", f"--out leaderboards/raw/{record['_file']}", command)
    return Cost(per_task, per_item * per_task * tasks / 60, command)
