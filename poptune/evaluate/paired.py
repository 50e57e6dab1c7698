"""Paired accuracy drops: the full model and a configuration scored on the same items, item by item.

The drop of a suite is the mean over its tasks of each task's mean per-item difference (full minus
configuration, in points). Most items come out the same under a mild configuration, so pairing makes the
interval far narrower than two separate ones; but an interval never collapses while items could still flip.

**Method and coverage.** For metrics in [0, 1] (correct/incorrect, F1, exact match) each item's difference
``d = full - configuration`` lies in [-1, 1]; ``(1 + d) / 2`` is bounded, and the interval is the two-sided
betting confidence sequence of :mod:`poptune.evaluate.confseq` (Waudby-Smith and Ramdas 2024) over the items
in the order they were scored, tasks in blocks of one item each: each end is wrong with probability at most
2.5% **at every look at once**. So racing may look after every round and stop when the interval leaves the
budget, and "within budget at 95%" (upper end <= budget) is wrong at most 2.5% of the time when the true drop
equals the budget, however many rounds were taken (``tests/evaluate/test_decisions.py`` checks this by a seeded
simulation). No item flipped in n items still leaves an upper end of about ``ln(40) / (0.75 n)`` (14 points at
32 items, 1.9 at 250): never [0, 0]. Tasks with unequal item counts (a task exhausted before the others) are
bounded one by one at ``alpha / tasks`` (Bonferroni) and their bounds averaged.

Metrics that are not bounded (bits per byte, lower is better: the drop is then configuration minus full model)
keep the seeded percentile bootstrap (:func:`scipy.stats.bootstrap`, stratified by task): an approximate
interval for one look, labelled ``bootstrap`` in :attr:`PairedDrop.method`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from poptune.errors import ConfigError

__all__ = ["PairedDrop", "paired_drop", "BETTING", "BOOTSTRAP", "IDENTICAL"]

#: Resamples of the bootstrap: the interval's ends move by well under 0.1 point between seeds at this count.
N_RESAMPLES = 2000

#: :attr:`PairedDrop.method` of the anytime-valid betting confidence sequence.
BETTING = "betting-cs"
#: ... of the approximate percentile bootstrap (unbounded metrics; drops stored before the betting sequence).
BOOTSTRAP = "bootstrap"
#: ... of the full model against itself: the same model, so the drop is 0 exactly, not estimated.
IDENTICAL = "identical"


@dataclass(frozen=True)
class PairedDrop:
    """A drop with its 95% interval, in the metric's points (x100 for a fraction), and the items behind it.

    Attributes:
        mean: Mean over tasks of the mean per-item difference (positive: worse than the full model).
        lo, hi: The interval's ends (see ``method``).
        items: Items per task.
        flipped: Items whose outcome differs between the two sides, per task.
        method: How the interval was made: :data:`BETTING` (valid at every look), :data:`BOOTSTRAP`
            (approximate, one look) or :data:`IDENTICAL`. Drops stored before this field read as bootstrap.
        confidence: The interval's two-sided confidence.
    """

    mean: float
    lo: float
    hi: float
    items: dict[str, int]
    flipped: dict[str, int]
    method: str = BOOTSTRAP
    confidence: float = 0.95
    losses: dict[str, int] = field(default_factory=dict)

    @property
    def half_width(self) -> float:
        return (self.hi - self.lo) / 2

    def within(self, budget: float) -> bool:
        """Within ``budget`` at 95%: the interval's upper end is at most the budget."""
        return self.hi <= budget

    def beyond(self, budget: float) -> bool:
        """Beyond ``budget`` at 95%: the interval's lower end exceeds the budget."""
        return self.lo > budget

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "PairedDrop":
        return cls(mean=float(data["mean"]), lo=float(data["lo"]), hi=float(data["hi"]),
                   items={k: int(v) for k, v in data["items"].items()},
                   flipped={k: int(v) for k, v in data.get("flipped", {}).items()},
                   method=str(data.get("method", BOOTSTRAP)), confidence=float(data.get("confidence", 0.95)),
                   losses={k: int(v) for k, v in data.get("losses", {}).items()})

    @classmethod
    def identical(cls, items: Mapping[str, int]) -> "PairedDrop":
        """The full model against itself: 0 exactly (the same model on the same items, not a sample)."""
        zeros = {t: 0 for t in items}
        return cls(0.0, 0.0, 0.0, dict(items), dict(zeros), IDENTICAL, 0.95, dict(zeros))

    def __str__(self) -> str:
        return f"{self.mean:+.2f} [{self.lo:+.2f}, {self.hi:+.2f}]"


def paired_drop(
    full: Mapping[str, Sequence[float]],
    other: Mapping[str, Sequence[float]],
    *,
    lower_is_better: Sequence[str] = (),
    scale: float = 100.0,
    seed: int = 0,
    confidence: float = 0.95,
) -> PairedDrop:
    """The paired drop of ``other`` against ``full`` over the same items of each task (module docstring).

    Args:
        full: Per task, the full model's per-item outcomes (1/0 correct, F1 in [0, 1], bits per byte, ...),
            in the order they were scored.
        other: Per task, the configuration's outcomes on the same items, in the same order.
        lower_is_better: Tasks whose metric is better when lower (the drop is then ``other - full``); a suite
            with any such task gets the bootstrap interval.
        scale: Multiplies every difference (100: fractions become points).
        seed: Seed of the bootstrap's resampling (the betting interval is deterministic).
        confidence: Two-sided coverage of the interval.

    Example: 32 items, none changed: ``paired_drop({"t": [1.0] * 32}, {"t": [1.0] * 32})`` is ``+0.00 [-14.01,
    +14.01]``; the exact binomial bound for one look, 10.9 points, is the least any valid interval can say.

    Raises:
        ConfigError: Tasks or item counts differ between the sides, or a task has no items.
    """
    import numpy as np

    if set(full) != set(other) or not full:
        raise ConfigError(f"paired outcomes need the same tasks on both sides, got {sorted(full)} and {sorted(other)}")
    if not 0 < confidence < 1:
        raise ConfigError(f"`confidence` must be in (0, 1), got {confidence}")
    diffs: dict[str, Any] = {}
    flipped, losses = {}, {}
    for task in full:
        a = np.asarray(full[task], dtype=np.float64)
        b = np.asarray(other[task], dtype=np.float64)
        if a.shape != b.shape or a.ndim != 1 or a.size == 0:
            raise ConfigError(f"task {task!r}: paired outcomes need the same items on both sides, "
                              f"got {a.size} and {b.size}")
        d = (b - a) if task in lower_is_better else (a - b)
        diffs[task] = d
        flipped[task] = int(np.count_nonzero(np.abs(d) > 1e-12))
        losses[task] = int(np.count_nonzero(d > 1e-12))
    mean = scale * float(np.mean([d.mean() for d in diffs.values()]))
    items = {task: len(d) for task, d in diffs.items()}
    bounded = not lower_is_better and all(np.all(np.abs(d) <= 1 + 1e-12) for d in diffs.values())
    if bounded:
        lo, hi = _betting(list(diffs.values()), confidence)
        return PairedDrop(mean, scale * lo, scale * hi, items, flipped, BETTING, confidence, losses)
    lo, hi = _bootstrap([scale * d for d in diffs.values()], mean, confidence, seed)
    return PairedDrop(mean, lo, hi, items, flipped, BOOTSTRAP, confidence, losses)


def _betting(diffs: list[Any], confidence: float) -> tuple[float, float]:
    """The confidence sequence's ends for the mean of the tasks' mean differences (in [-1, 1])."""
    from poptune.evaluate import confseq

    alpha = (1 - confidence) / 2
    shifted = [(1 + d) / 2 for d in diffs]
    if len({len(d) for d in diffs}) == 1:  # one item of every task per block
        lo, hi = confseq.lower_bound(shifted, alpha), confseq.upper_bound(shifted, alpha)
    else:  # unequal counts: each task at alpha / tasks, the bounds averaged
        each = alpha / len(diffs)
        lo = sum(confseq.lower_bound([x], each) for x in shifted) / len(diffs)
        hi = sum(confseq.upper_bound([x], each) for x in shifted) / len(diffs)
    return 2 * lo - 1, 2 * hi - 1


def _bootstrap(diffs: list[Any], mean: float, confidence: float, seed: int) -> tuple[float, float]:
    """Seeded stratified percentile bootstrap of the mean of the tasks' means (approximate, one look)."""
    import numpy as np
    from scipy import stats

    if all(np.ptp(d) == 0 for d in diffs):  # no spread: every resample gives this value
        return mean, mean

    def statistic(*samples: Any, axis: int = -1) -> Any:
        return np.mean([np.mean(s, axis=axis) for s in samples], axis=0)

    result = stats.bootstrap(tuple(diffs), statistic, n_resamples=N_RESAMPLES, confidence_level=confidence,
                             method="percentile", vectorized=True, rng=np.random.default_rng(seed))
    lo, hi = float(result.confidence_interval.low), float(result.confidence_interval.high)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ConfigError(f"the drop's interval is not finite ({lo}, {hi})")
    return min(lo, mean), max(hi, mean)
