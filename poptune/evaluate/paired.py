"""Paired accuracy drops: the full model and a configuration scored on the same items, item by item.

Most items come out the same under a mild configuration, so the per-item difference is mostly zero and a
paired interval is far narrower than two separate ones. The drop of a suite is the mean over its tasks of
each task's mean per-item difference (full minus configuration, in points); its 95% interval comes from a
stratified bootstrap (every task's items resampled within the task, the same rows for both sides, since the
differences are taken first) by :func:`scipy.stats.bootstrap`, seeded, percentile method (it stays defined
when every difference is equal, where BCa is not).

For a metric where lower is better (bits per byte), the drop is configuration minus full model, so a
positive drop always means "worse than the full model".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from poptune.errors import ConfigError

__all__ = ["PairedDrop", "paired_drop"]

#: Resamples of the bootstrap: the interval's ends move by well under 0.1 point between seeds at this count.
N_RESAMPLES = 2000


@dataclass(frozen=True)
class PairedDrop:
    """A drop with its 95% interval, in the metric's points (x100 for a fraction), and the items behind it.

    Attributes:
        mean: Mean over tasks of the mean per-item difference (positive: worse than the full model).
        lo, hi: The 95% bootstrap interval of ``mean``.
        items: Items per task.
        flipped: Items whose outcome differs between the two sides, per task.
    """

    mean: float
    lo: float
    hi: float
    items: dict[str, int]
    flipped: dict[str, int]

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
                   flipped={k: int(v) for k, v in data.get("flipped", {}).items()})

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
    """The paired drop of ``other`` against ``full`` over the same items of each task.

    Args:
        full: Per task, the full model's per-item outcomes (1/0 correct, F1 in [0, 1], bits per byte, ...).
        other: Per task, the configuration's outcomes on the same items, in the same order.
        lower_is_better: Tasks whose metric is better when lower (the drop is then ``other - full``).
        scale: Multiplies every difference (100: fractions become points).
        seed: Seed of the bootstrap's resampling.
        confidence: Coverage of the interval.

    Raises:
        ConfigError: Tasks or item counts differ between the sides, or a task has no items.
    """
    import numpy as np
    from scipy import stats

    if set(full) != set(other) or not full:
        raise ConfigError(f"paired outcomes need the same tasks on both sides, got {sorted(full)} and {sorted(other)}")
    diffs = []
    flipped = {}
    for task in full:
        a = np.asarray(full[task], dtype=np.float64)
        b = np.asarray(other[task], dtype=np.float64)
        if a.shape != b.shape or a.ndim != 1 or a.size == 0:
            raise ConfigError(f"task {task!r}: paired outcomes need the same items on both sides, "
                              f"got {a.size} and {b.size}")
        d = (b - a) if task in lower_is_better else (a - b)
        diffs.append(scale * d)
        flipped[task] = int(np.count_nonzero(np.abs(a - b) > 1e-12))
    mean = float(np.mean([d.mean() for d in diffs]))
    items = {task: len(d) for task, d in zip(full, diffs)}
    if all(np.ptp(d) == 0 for d in diffs):  # no spread: the resampled statistic is this value every time
        return PairedDrop(mean, mean, mean, items, flipped)

    def statistic(*samples: Any, axis: int = -1) -> Any:
        return np.mean([np.mean(s, axis=axis) for s in samples], axis=0)

    result = stats.bootstrap(
        tuple(diffs), statistic, n_resamples=N_RESAMPLES, confidence_level=confidence, method="percentile",
        vectorized=True, rng=np.random.default_rng(seed),
    )
    lo, hi = float(result.confidence_interval.low), float(result.confidence_interval.high)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ConfigError(f"the drop's interval is not finite ({lo}, {hi})")
    return PairedDrop(mean, min(lo, mean), max(hi, mean), items, flipped)
