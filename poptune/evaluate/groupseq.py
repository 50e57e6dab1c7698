"""Group-sequential designs: a one-sided test looked at on planned looks, its error spent across them.

A race scores items in planned rounds (so many items, then twice as many, up to a cap) and may stop at any of
them. Testing at the full level at every look would inflate the error; a confidence sequence valid at *every*
conceivable look (a betting martingale) keeps it but pays about four times the items of one planned look. A
group-sequential design sits between: the looks are planned (their item counts are fixed before any outcome is
seen), and the error ``alpha`` is spent across them so that the chance of rejecting a true hypothesis at any
look at all is ``alpha``.

**Method.** The alpha-spending approach of Lan and DeMets, "Discrete sequential boundaries for clinical
trials", Biometrika 70(3), 659-663 (1983), with the O'Brien-Fleming-type spending function

    alpha(t) = 2 - 2 Phi(z_{1 - alpha/2} / sqrt(t)),   t = items so far / items planned,

which spends almost nothing at early looks and nearly all of ``alpha`` at the last, so the last look's test is
within a few percent of a fixed-size test's power. Other spending functions (``spending``): the Pocock type
``alpha ln(1 + (e - 1) t)`` and the Hwang-Shih-DeCani family ``alpha (1 - exp(-gamma t)) / (1 - exp(-gamma))``
(Hwang, Shih and DeCani, "Group sequential designs using a family of type I error probability spending
functions", Statistics in Medicine 9, 1990), which spend earlier. Every function spends exactly ``alpha`` by
``t = 1``, so the last planned look, wherever the cap put it and however close it is to the one before, spends
what the earlier looks left; looks past the plan (``t > 1``) spend nothing. The
boundaries come from the standardized statistics' joint law (a Brownian motion read at the looks' information
times): ``Z_1, ..., Z_K`` are jointly normal with ``corr(Z_j, Z_k) = sqrt(t_j / t_k)``. They are computed by the
recursive numerical integration of Armitage, McPherson and Rowe (1969), as in Jennison and Turnbull, *Group
Sequential Methods with Applications to Clinical Trials* (2000), ch. 19: deterministic, no sampling.

**Repeated confidence bounds** (Jennison and Turnbull, "Interim analyses: the repeated confidence interval
approach", J. R. Stat. Soc. B 51(3), 305-361, 1989): inverting the design's test at look k gives a bound that,
with the bounds of every other look, misses the true value with probability at most ``alpha`` in all. So the
tightest bound over the looks so far is a valid claim, whichever look the race stopped at.

The spending functions were chosen by the seeded simulation of :mod:`poptune.evaluate.decisions`
(``leaderboards/decision-errors-simulated-*.md``): O'Brien-Fleming keeps the error at the budget and reaches the
power of a one-look test within about 3% more items; a race's rejection side spends by Hwang-Shih-DeCani with
``gamma = -2`` instead (:data:`poptune.evaluate.paired.LOWER_SPENDING`), to reject hopeless configurations at
the first look.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from poptune.errors import ConfigError

__all__ = ["spent", "boundaries", "crossing_probability", "drift_for_power", "hwang_shih_decani", "OBRIEN_FLEMING",
           "POCOCK"]

#: Standard deviations of the marginal law that the integration grid spans below the boundary.
_SPAN = 8.0
#: Grid points per standard deviation of the narrower of the marginal law and the step's increment.
_DENSITY = 24
_MAX_POINTS = 2001


#: The O'Brien-Fleming-type spending function (the default; a race's "within budget" side).
OBRIEN_FLEMING = "obrien-fleming"
#: The Pocock-type spending function ``alpha ln(1 + (e - 1) t)`` (Lan and DeMets 1983).
POCOCK = "pocock"


def hwang_shih_decani(gamma: float) -> str:
    """The name of the Hwang-Shih-DeCani spending function of parameter ``gamma``:
    ``alpha (1 - exp(-gamma t)) / (1 - exp(-gamma))`` (``gamma = 0``: ``alpha t``). Negative ``gamma`` keeps
    more of the error for later looks (``-4`` is close to O'Brien-Fleming, ``1`` to Pocock)."""
    return f"hsd({float(gamma):g})"


def _parse(spending: str) -> tuple[str, float]:
    if spending in (OBRIEN_FLEMING, POCOCK):
        return spending, 0.0
    match = re.fullmatch(r"hsd\(([-+0-9.eE]+)\)", spending)
    if match is None:
        raise ConfigError(f"unknown spending function {spending!r}: {OBRIEN_FLEMING!r}, {POCOCK!r} or "
                          "'hsd(gamma)'")
    return "hsd", float(match.group(1))


def spent(t: float, alpha: float, spending: str = OBRIEN_FLEMING) -> float:
    """The error spent by information fraction ``t``: ``alpha`` at ``t >= 1``, and before it by ``spending``
    (O'Brien-Fleming type ``2 - 2 Phi(z_{1 - alpha/2} / sqrt(t))`` by default)."""
    from scipy.stats import norm

    kind, gamma = _parse(spending)
    if t <= 0:
        return 0.0
    if t >= 1:
        return alpha
    if kind == OBRIEN_FLEMING:
        return float(2 * norm.sf(norm.isf(alpha / 2) / math.sqrt(t)))
    if kind == POCOCK:
        return float(alpha * math.log(1 + (math.e - 1) * t))
    if abs(gamma) < 1e-12:
        return float(alpha * t)
    return float(alpha * math.expm1(-gamma * t) / math.expm1(-gamma))


def _check(fractions: Sequence[float], alpha: float) -> tuple[float, ...]:
    if not 0 < alpha < 0.5:
        raise ConfigError(f"`alpha` must be in (0, 0.5), got {alpha}")
    ts = tuple(float(t) for t in fractions)
    if not ts or any(t <= 0 for t in ts) or any(b <= a for a, b in zip(ts, ts[1:])):
        raise ConfigError(f"a design's looks need increasing positive information fractions, got {list(ts)}")
    return ts


def _grid(low: float, high: float, step: float) -> Any:
    import numpy as np

    count = int(min(_MAX_POINTS, max(51, math.ceil((high - low) / step) + 1)))
    return np.linspace(low, high, count)


def _weights(x: Any) -> Any:
    """Trapezoid weights of a uniform grid."""
    import numpy as np

    w = np.full(x.size, x[1] - x[0])
    w[0] = w[-1] = (x[1] - x[0]) / 2
    return w


def _sf(z: Any) -> Any:
    """The standard normal's upper tail (``scipy.stats.norm.sf`` without its argument checks: the same ufunc)."""
    from scipy.special import ndtr

    return ndtr(-z)


def _pdf(z: Any) -> Any:
    """The standard normal density (``scipy.stats.norm.pdf``'s own formula, without its argument checks)."""
    import numpy as np

    return np.exp(-z**2 / 2.0) / _PDF_C


_PDF_C = math.sqrt(2 * math.pi)


def _crossing(ts: tuple[float, ...], k: int, paths: Any, up: float, drift: float) -> float:
    """The chance that ``B_k = W(t_k) + drift * t_k`` first crosses ``up`` (B scale) at look k, given
    ``paths``: the grid and weighted sub-density of the paths still below every boundary after look k - 1."""
    import numpy as np

    if k == 0:
        return float(_sf(np.float64((up - drift * ts[0]) / math.sqrt(ts[0]))))
    x, w = paths
    step_sd, shift = math.sqrt(ts[k] - ts[k - 1]), drift * (ts[k] - ts[k - 1])
    return float(np.sum(w * _sf((up - x - shift) / step_sd)))


def _advance(ts: tuple[float, ...], k: int, paths: Any, up: float, drift: float) -> tuple[Any, Any]:
    """The paths still running after look k (boundary ``up``), carried on a grid and convolved with the next
    increment's normal law (trapezoid rule)."""
    mean, marginal = drift * ts[k], math.sqrt(ts[k])
    next_sd = math.sqrt(ts[k + 1] - ts[k])
    y = _grid(mean - _SPAN * marginal, min(up, mean + _SPAN * marginal), min(marginal, next_sd) / _DENSITY)
    if k == 0:
        density = _pdf((y - mean) / marginal) / marginal
    else:
        x, w = paths
        step_sd, shift = math.sqrt(ts[k] - ts[k - 1]), drift * (ts[k] - ts[k - 1])
        density = (_pdf((y[:, None] - x[None, :] - shift) / step_sd) / step_sd) @ w  # (len(y), len(x)) @ (len(x),)
    return y, _weights(y) * density


def _walk(ts: tuple[float, ...], uppers: Sequence[float], drift: float) -> list[float]:
    """The chance that ``B_k = W(t_k) + drift * t_k`` first crosses ``uppers[k]`` (B scale) at each look k.

    The sub-density of the paths still below every boundary is carried on a grid from look to look and
    convolved with the next increment's normal law (trapezoid rule)."""
    crossed: list[float] = []
    paths: Any = None
    for k, up in enumerate(uppers):
        crossed.append(_crossing(ts, k, paths, up, drift))
        if k < len(uppers) - 1:
            paths = _advance(ts, k, paths, up, drift)
    return crossed


@lru_cache(maxsize=1024)
def _boundaries(ts: tuple[float, ...], alpha: float, spending: str = OBRIEN_FLEMING) -> tuple[float, ...]:
    """Each look's boundary in turn: the paths still running after the looks before are carried once, and only
    the new look's crossing is solved for (a root of one sum over the carried grid)."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    uppers: list[float] = []  # on the B scale: B_k = Z_k sqrt(t_k)
    used = 0.0
    paths: Any = None
    for k, t in enumerate(ts):
        spend = spent(t, alpha, spending) - used
        sd = math.sqrt(t)
        if spend < 1e-12:
            uppers.append(math.inf)
        elif all(math.isinf(u) for u in uppers):  # no path has stopped before: the marginal law alone
            uppers.append(float(norm.isf(spend)) * sd)
        else:
            def excess(u: float, k: int = k, spend: float = spend, paths: Any = paths) -> float:
                return _crossing(ts, k, paths, u, 0.0) - spend

            uppers.append(float(brentq(excess, -2 * sd, 12 * sd, xtol=1e-10)))
        used += spend if spend >= 1e-12 else 0.0
        if k < len(ts) - 1:
            paths = _advance(ts, k, paths, uppers[-1], 0.0)
    return tuple(u / math.sqrt(t) for u, t in zip(uppers, ts))


def boundaries(fractions: Sequence[float], alpha: float, spending: str = OBRIEN_FLEMING) -> tuple[float, ...]:
    """The one-sided critical values ``c_k`` of the design's looks: reject at look k when ``Z_k >= c_k``.

    Args:
        fractions: Each look's information fraction (items so far over items planned), increasing.
        alpha: The error over all looks together (one-sided).
        spending: The spending function (:data:`OBRIEN_FLEMING`, :data:`POCOCK`, :func:`hwang_shih_decani`).

    A look that spends nothing (past the plan, or spending under 1e-12) has ``c_k = inf``. One look at
    ``t = 1`` gives the fixed-size ``z_{1-alpha}``: ``boundaries([1.0], 0.025)`` is ``(1.95996...,)``.
    """
    _parse(spending)
    return _boundaries(_check(fractions, alpha), float(alpha), spending)


def crossing_probability(fractions: Sequence[float], alpha: float, drift: float,
                         spending: str = OBRIEN_FLEMING) -> float:
    """The chance the design rejects at some look when ``Z_k`` has mean ``drift * sqrt(t_k)`` (its power).

    ``drift`` is the standardized effect at full information: ``(budget - true drop) / (sd / sqrt(N))``.
    """
    ts = _check(fractions, alpha)
    cs = boundaries(ts, alpha, spending)
    return float(sum(_walk(ts, [c * math.sqrt(t) for c, t in zip(cs, ts)], drift)))


def drift_for_power(fractions: Sequence[float], alpha: float, power: float,
                    spending: str = OBRIEN_FLEMING) -> float:
    """The standardized effect at full information that the design detects with probability ``power``.

    One look: ``z_{1-alpha} + z_{power}`` (2.80 for 2.5% and 80%); spread over looks it is a little more.
    """
    from scipy.optimize import brentq

    if not 0 < power < 1:
        raise ConfigError(f"`power` must be in (0, 1), got {power}")
    return float(brentq(lambda d: crossing_probability(fractions, alpha, d, spending) - power, 0.0, 20.0,
                        xtol=1e-6))
