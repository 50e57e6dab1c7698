"""Intervals of a paired speedup: the distribution-free order-statistic interval of the median per-pair ratio.

A pair's ratio ``full / POP`` carries the load both members saw; the median over pairs is the speedup. Its
interval is ``[x_(k), x_(n-k+1)]``, two order statistics of the ``n`` ratios, with ``k`` the largest rank whose
exact coverage ``1 - 2 * P(Bin(n, 1/2) <= k - 1)`` is at least the confidence asked for: the true median lies
below ``x_(k)`` only when at most ``k - 1`` ratios fall below it, a binomial event with ``p = 1/2`` whatever the
ratios' distribution (continuous, pairs independent). Reference: W. J. Conover, *Practical Nonparametric
Statistics*, 3rd ed. (Wiley, 1999), section 3.2 (the confidence interval for a quantile); G. J. Hahn and W. Q.
Meeker, *Statistical Intervals* (Wiley, 1991), distribution-free intervals for percentiles.

Worked examples (Conover's table of the binomial with ``p = 1/2``): ten pairs give ``[x_(2), x_(9)]`` with
coverage 0.9785; six give ``[x_(1), x_(6)]``, the whole range, with 0.9688. Fewer than :func:`pairs_for`
pairs (:data:`MIN_PAIRS_95` = 6 at 95%) cannot reach the confidence at all: the interval is then the range of
the ratios and its coverage, ``1 - 2 * 0.5**n`` (0.9375 for five pairs, 0.75 for three), is less than claimed;
:func:`median_ci` says so (:attr:`MedianInterval.meets`). The coverage is exact for continuous ratios and at
least as stated with ties (the interval is closed). Nothing is random: one set of ratios gives one interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from poptune.errors import ConfigError

__all__ = ["MIN_JUDGED", "MIN_PAIRS_95", "MedianInterval", "median_ci", "median_interval", "median_interval_coverage",
           "median_rank", "pairs_for", "relative_half_width", "excludes"]

#: Fewest pairs for a 95% interval of the median that reaches its confidence (``1 - 2 * 0.5**6 = 0.969``).
MIN_PAIRS_95 = 6

#: Fewest pairs whose interval a null check or the ideal check judges (under :data:`MIN_PAIRS_95` it is the
#: ratios' range, with its lower coverage stated).
MIN_JUDGED = 3


def _check_confidence(confidence: float) -> None:
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0.0 < confidence < 1.0:
        raise ConfigError(f"`confidence` must be in (0, 1), got {confidence}")


def _check_n(n: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"`n` must be an integer >= 1, got {n!r}")


@lru_cache(maxsize=512)
def _coverage(n: int, k: int) -> float:
    """Exact coverage of ``[x_(k), x_(n-k+1)]`` for the median of ``n`` continuous values."""
    from scipy.stats import binom

    return float(1.0 - 2.0 * binom.cdf(k - 1, n, 0.5))


def median_rank(n: int, confidence: float = 0.95) -> int:
    """The rank ``k`` of the interval ``[x_(k), x_(n-k+1)]``: the largest whose coverage is >= ``confidence``
    (1, the range, when none is).

    Example: ``median_rank(10) == 2``; ``median_rank(6) == 1``; ``median_rank(3) == 1`` (below its confidence).
    """
    _check_n(n)
    _check_confidence(confidence)
    k = 1
    while k + 1 <= (n + 1) // 2 and _coverage(n, k + 1) >= confidence:
        k += 1
    return k


def median_interval_coverage(n: int, confidence: float = 0.95) -> float:
    """The actual coverage of :func:`median_interval` over ``n`` values asked for ``confidence``.

    Example: ``median_interval_coverage(10) == 0.978515625``; ``median_interval_coverage(5) == 0.9375`` (< 0.95).
    """
    return _coverage(n, median_rank(n, confidence))


def pairs_for(confidence: float = 0.95) -> int:
    """The fewest values whose median interval reaches ``confidence``: the least ``n`` with ``1 - 2 * 0.5**n >=
    confidence`` (6 at 95%, 5 at 90%, 8 at 99%)."""
    _check_confidence(confidence)
    n = max(1, math.ceil(math.log2(2.0 / (1.0 - confidence))) - 1)
    while _coverage(n, 1) < confidence:
        n += 1
    return n


@dataclass(frozen=True)
class MedianInterval:
    """An order-statistic interval of the median and what it covers.

    Attributes:
        low, high: The interval's ends, ``x_(k)`` and ``x_(n-k+1)``.
        ranks: ``(k, n-k+1)``, 1-based ranks in the sorted values.
        n: Number of values.
        confidence: The level asked for.
        coverage: The level it has, exactly (>= ``confidence`` unless there were too few values).
    """

    low: float
    high: float
    ranks: tuple[int, int]
    n: int
    confidence: float
    coverage: float

    @property
    def meets(self) -> bool:
        """Whether the interval reaches its confidence (False under :func:`pairs_for` values)."""
        return self.coverage >= self.confidence

    def as_tuple(self) -> tuple[float, float]:
        """``(low, high)``."""
        return self.low, self.high


def median_ci(values: Sequence[float], confidence: float = 0.95) -> MedianInterval:
    """The distribution-free ``confidence`` interval of the median of ``values`` with its actual coverage.

    Example: ``median_ci([float(i) for i in range(1, 11)])`` is ``[2.0, 9.0]`` with coverage 0.9785.

    Raises:
        ConfigError: no values, or ``confidence`` outside (0, 1).
    """
    if not values:
        raise ConfigError("`ratios` must hold at least one value, got none")
    _check_confidence(confidence)
    ordered = sorted(float(v) for v in values)
    n = len(ordered)
    k = median_rank(n, confidence)
    return MedianInterval(low=ordered[k - 1], high=ordered[n - k], ranks=(k, n - k + 1), n=n,
                          confidence=float(confidence), coverage=_coverage(n, k))


def median_interval(ratios: Sequence[float], *, confidence: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """The ``confidence`` interval of the median of ``ratios``: ``median_ci(ratios, confidence).as_tuple()``.

    ``seed`` is accepted for the callers of the bootstrap this replaced and ignored: the interval is exact.
    Example: ``median_interval([1.0] * 8) == (1.0, 1.0)``; ratios 1..10 give ``(2.0, 9.0)``.

    Raises:
        ConfigError: no ratios, or ``confidence`` outside (0, 1).
    """
    return median_ci(ratios, confidence).as_tuple()


def relative_half_width(interval: tuple[float, float], centre: float) -> float:
    """Half the interval's width over ``centre`` (0.02 = +-2%); infinite for a centre of 0."""
    return (interval[1] - interval[0]) / 2 / centre if centre > 0 else float("inf")


def excludes(interval: tuple[float, float], value: float, tolerance: float) -> bool:
    """Whether ``interval`` lies wholly outside ``value * (1 +- tolerance)`` (a difference beyond tolerance)."""
    return interval[0] > value * (1 + tolerance) or interval[1] < value * (1 - tolerance)
