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
:func:`median_ci` says so (:attr:`~poptune.interval.Interval.meets`). The coverage is exact for continuous ratios and at
least as stated with ties (the interval is closed). Nothing is random: one set of ratios gives one interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

from poptune.errors import ConfigError
from poptune.interval import Interval

__all__ = ["MIN_JUDGED", "MIN_PAIRS_95", "median_ci", "median_interval_coverage", "median_rank", "pairs_for",
           "percentile"]

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
    """The actual coverage of :func:`median_ci` over ``n`` values asked for ``confidence``.

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


def percentile(values: Sequence[float], q: float) -> float:
    """Returns the ``q``-th percentile with linear interpolation (numpy's default method).

    Example: ``percentile([1, 2, 3, 4], 50) == 2.5``; ``percentile([1, 2, 3, 4], 90) == 3.7``.
    """
    if not values:
        raise ConfigError("`values` must hold at least one value, got none")
    if not 0.0 <= q <= 100.0:
        raise ConfigError(f"`q` must be in [0, 100], got {q}")
    ordered = sorted(values)
    rank = q / 100.0 * (len(ordered) - 1)
    lo, hi = math.floor(rank), math.ceil(rank)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


def median_ci(values: Sequence[float], confidence: float = 0.95) -> Interval:
    """The distribution-free ``confidence`` interval of the median of ``values`` with its actual coverage.

    The point is the median (:func:`percentile` at 50); the ends are ``x_(k)`` and ``x_(n-k+1)`` with ``k``
    :func:`median_rank`; :attr:`~poptune.interval.Interval.coverage` is the exact coverage (below ``confidence``
    under :func:`pairs_for` values: :attr:`~poptune.interval.Interval.meets` is then False).
    Example: ``median_ci([float(i) for i in range(1, 11)])`` is ``5.5 [2.0, 9.0]`` with coverage 0.9785.

    Raises:
        ConfigError: no values, or ``confidence`` outside (0, 1).
    """
    if not values:
        raise ConfigError("`ratios` must hold at least one value, got none")
    _check_confidence(confidence)
    ordered = sorted(float(v) for v in values)
    n = len(ordered)
    k = median_rank(n, confidence)
    return Interval(percentile(ordered, 50), ordered[k - 1], ordered[n - k], float(confidence), _coverage(n, k))
