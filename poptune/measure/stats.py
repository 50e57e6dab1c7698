"""Intervals of a paired speedup: a seeded bootstrap over pairs of the median per-pair ratio (scipy).

A pair's ratio ``full / POP`` carries the load both members saw; the median over pairs is the speedup, and its
95% interval comes from resampling whole pairs (:func:`scipy.stats.bootstrap`, percentile method, seeded, so
one set of samples always gives one interval). With fewer than :data:`MIN_BOOTSTRAP` pairs a bootstrap says
nothing useful; the interval is then the range of the ratios.
"""

from __future__ import annotations

from collections.abc import Sequence

from poptune.errors import ConfigError

__all__ = ["MIN_BOOTSTRAP", "median_interval", "relative_half_width", "excludes"]

#: Fewest pairs for a bootstrap interval; below, the interval is the ratios' range.
MIN_BOOTSTRAP = 3

#: Bootstrap resamples (the percentile interval's third digit is then stable).
RESAMPLES = 2000


def median_interval(ratios: Sequence[float], *, confidence: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """The ``confidence`` interval of the median of ``ratios``, by a seeded percentile bootstrap over them.

    Example: ``median_interval([1.0] * 8) == (1.0, 1.0)``; ten ratios spread over 0.9..1.1 give about (0.95, 1.05).

    Raises:
        ConfigError: no ratios, or ``confidence`` outside (0, 1).
    """
    if not ratios:
        raise ConfigError("`ratios` must hold at least one value, got none")
    if not 0.0 < confidence < 1.0:
        raise ConfigError(f"`confidence` must be in (0, 1), got {confidence}")
    values = [float(r) for r in ratios]
    if len(values) < MIN_BOOTSTRAP or min(values) == max(values):
        return min(values), max(values)
    import numpy as np
    from scipy.stats import bootstrap

    result = bootstrap((np.asarray(values),), np.median, confidence_level=confidence, n_resamples=RESAMPLES,
                       method="percentile", vectorized=True, axis=-1, rng=np.random.default_rng(seed))
    low, high = result.confidence_interval
    return float(low), float(high)


def relative_half_width(interval: tuple[float, float], centre: float) -> float:
    """Half the interval's width over ``centre`` (0.02 = +-2%); infinite for a centre of 0."""
    return (interval[1] - interval[0]) / 2 / centre if centre > 0 else float("inf")


def excludes(interval: tuple[float, float], value: float, tolerance: float) -> bool:
    """Whether ``interval`` lies wholly outside ``value * (1 +- tolerance)`` (a difference beyond tolerance)."""
    return interval[0] > value * (1 + tolerance) or interval[1] < value * (1 - tolerance)
