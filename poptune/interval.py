"""One interval type for every estimate with its confidence interval: a speedup and its order-statistic interval,
an accuracy drop and its score interval, a share of changed answers and its Clopper-Pearson interval, a mean over
seeds and its bootstrap interval.

:class:`Interval` holds the point estimate, the two ends and the confidence level asked for (and, where the
method knows it exactly, the coverage it has). It computes nothing statistical itself: the methods live beside
their data (:mod:`poptune.measure.stats`, :mod:`poptune.evaluate.changed`, :mod:`poptune.evaluate.paired`,
:func:`poptune.tune.efficiency.mean_interval`). Stored formats keep their own field names (``speedup_lo`` /
``speedup_hi``, ``{"mean", "lo", "hi"}``, ``[lo, hi]``); :meth:`Interval.from_fields` and
:meth:`Interval.from_ends` read them back.

Example::

    >>> ci = Interval(1.42, 1.38, 1.47)
    >>> ci.contains(1.4), ci.excludes(1.0), round(ci.width, 2)
    (True, True, 0.09)
    >>> ci.format(".2f", "x")
    '1.42x [1.38, 1.47]'
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from poptune.errors import ConfigError

__all__ = ["Interval"]


@dataclass(frozen=True)
class Interval:
    """An estimate with its two-sided (or, with ``lo`` at the floor, one-sided) confidence interval.

    Attributes:
        point: The estimate (a median ratio, a mean, a share).
        lo, hi: The interval's ends, ``lo <= hi``.
        level: The confidence asked for, in (0, 1).
        coverage: The coverage the interval has, where the method gives it exactly (an order-statistic interval
            over too few values covers less than ``level``); None: the method's nominal ``level``.
    """

    point: float
    lo: float
    hi: float
    level: float = 0.95
    coverage: float | None = None

    def __post_init__(self) -> None:
        if not 0.0 < self.level < 1.0:
            raise ConfigError(f"`level` must be in (0, 1), got {self.level}")
        if self.lo > self.hi:  # NaN ends compare False and pass: a stored record is read as it was written
            raise ConfigError(f"`lo` must be <= `hi`, got [{self.lo}, {self.hi}]")

    @classmethod
    def from_ends(cls, point: float, ends: Sequence[Any] | None, level: float = 0.95) -> Interval | None:
        """An interval from stored ends ``[lo, hi]`` (a JSON list, a tuple); None when there are none.

        Example: ``Interval.from_ends(1.4, [1.3, 1.5])`` is ``Interval(1.4, 1.3, 1.5)``.
        """
        if not ends or ends[0] is None or ends[1] is None:
            return None
        lo, hi = ends
        return cls(float(point), float(lo), float(hi), level)

    @classmethod
    def from_fields(cls, data: Mapping[str, Any], key: str = "", *, level: float = 0.95) -> Interval | None:
        """An interval from a stored mapping's fields; None when the point or an end is missing or None.

        ``key`` names ``{key}`` (the point), ``{key}_lo`` and ``{key}_hi`` (``speedup``, ``speedup_lo``,
        ``speedup_hi`` of a timing row); an empty ``key`` reads ``mean``, ``lo``, ``hi`` (a stored paired drop).

        Example: ``Interval.from_fields({"mean": 1.0, "lo": -0.5, "hi": 2.5})`` is ``Interval(1.0, -0.5, 2.5)``.
        """
        names = (f"{key}_lo", f"{key}_hi") if key else ("lo", "hi")
        centre = key or "mean"
        if data.get(names[0]) is None or data.get(names[1]) is None or data.get(centre) is None:
            return None
        return cls(float(data[centre]), float(data[names[0]]), float(data[names[1]]), level)

    @property
    def width(self) -> float:
        """``hi - lo``."""
        return self.hi - self.lo

    @property
    def meets(self) -> bool:
        """Whether the interval reaches its level (False only where :attr:`coverage` says it falls short)."""
        return self.coverage is None or self.coverage >= self.level

    def relative_half_width(self) -> float:
        """Half the width over the point (0.02 = +-2%); infinite for a point of 0 or below."""
        return self.width / 2 / self.point if self.point > 0 else math.inf

    def contains(self, value: float) -> bool:
        """Whether ``lo <= value <= hi`` (the interval is closed)."""
        return self.lo <= value <= self.hi

    def above(self, other: Interval | float) -> bool:
        """Whether the interval lies wholly above ``other`` (an interval's upper end, or a value)."""
        return self.lo > (other.hi if isinstance(other, Interval) else other)

    def below(self, other: Interval | float) -> bool:
        """Whether the interval lies wholly below ``other`` (an interval's lower end, or a value)."""
        return self.hi < (other.lo if isinstance(other, Interval) else other)

    def excludes(self, value: float, tolerance: float = 0.0) -> bool:
        """Whether the interval lies wholly outside ``value * (1 +- tolerance)`` (a difference beyond tolerance).

        Example: ``Interval(1.06, 1.04, 1.08).excludes(1.0, 0.03)`` is True; with ``0.05`` it is False.
        """
        return self.lo > value * (1 + tolerance) or self.hi < value * (1 - tolerance)

    def ends(self) -> tuple[float, float]:
        """``(lo, hi)``, as stored formats keep them."""
        return self.lo, self.hi

    def scaled(self, factor: float) -> Interval:
        """Point and ends times ``factor`` (> 0), e.g. a share as a percentage."""
        if factor <= 0:
            raise ConfigError(f"`factor` must be > 0, got {factor}")
        return Interval(self.point * factor, self.lo * factor, self.hi * factor, self.level, self.coverage)

    def bracket(self, spec: str = ".2f") -> str:
        """The ends as the reports print them: ``[lo, hi]`` with each end in format ``spec``.

        Example: ``Interval(0.5, -1.0, 2.0).bracket("+.2f") == "[-1.00, +2.00]"``.
        """
        return f"[{self.lo:{spec}}, {self.hi:{spec}}]"

    def format(self, spec: str = ".2f", unit: str = "") -> str:
        """The point, ``unit`` and the bracketed ends: ``1.42x [1.38, 1.47]`` for ``format(".2f", "x")``."""
        return f"{self.point:{spec}}{unit} {self.bracket(spec)}"

    def __str__(self) -> str:
        return self.format()
