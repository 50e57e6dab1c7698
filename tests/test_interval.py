"""The one interval type: what its users ask of it, and the stored forms it reads back."""

from __future__ import annotations

import dataclasses
import math

import pytest

from poptune.errors import ConfigError
from poptune.interval import Interval


def test_an_interval_holds_its_point_ends_and_level():
    ci = Interval(1.42, 1.38, 1.47)
    assert (ci.point, ci.lo, ci.hi, ci.level, ci.coverage) == (1.42, 1.38, 1.47, 0.95, None)
    assert ci.width == pytest.approx(0.09) and ci.ends() == (1.38, 1.47) and ci.meets
    with pytest.raises(dataclasses.FrozenInstanceError):
        ci.lo = 0.0  # type: ignore[misc]  # frozen: the assignment is what is tested


def test_contains_above_below_and_excludes():
    ci = Interval(1.06, 1.04, 1.08)
    assert ci.contains(1.04) and ci.contains(1.08) and not ci.contains(1.03)  # closed
    assert ci.above(1.0) and not ci.above(1.04) and ci.below(1.09) and not ci.below(1.08)
    assert ci.above(Interval(1.0, 0.98, 1.02)) and Interval(1.0, 0.98, 1.02).below(ci)
    assert not ci.above(Interval(1.05, 1.03, 1.05))  # overlapping
    assert ci.excludes(1.0) and ci.excludes(1.0, 0.03) and not ci.excludes(1.0, 0.05)
    assert Interval(0.9, 0.9, 0.95).excludes(1.0, 0.03) and not Interval(1.0, 0.98, 1.01).excludes(1.0)


def test_relative_half_width_and_coverage():
    assert Interval(2.0, 1.9, 2.1).relative_half_width() == pytest.approx(0.05)
    assert Interval(0.0, -1.0, 1.0).relative_half_width() == math.inf
    short = Interval(1.0, 0.9, 1.1, level=0.95, coverage=0.75)
    assert not short.meets and Interval(1.0, 0.9, 1.1, coverage=0.97).meets


def test_the_reports_formats():
    assert Interval(1.4213, 1.3791, 1.4702).format(".2f", "x") == "1.42x [1.38, 1.47]"
    assert Interval(0.5, -1.0, 2.0).bracket("+.2f") == "[-1.00, +2.00]"
    assert Interval(0.5, -1.0, 2.0).format("+.2f") == "+0.50 [-1.00, +2.00]"
    assert str(Interval(0.5, -1.0, 2.0)) == "0.50 [-1.00, 2.00]"
    assert Interval(0.1, 0.02, 0.3).scaled(100).ends() == pytest.approx((2.0, 30.0))


def test_stored_forms_read_back():
    assert Interval.from_ends(1.4, [1.3, 1.5]) == Interval(1.4, 1.3, 1.5)  # a JSON list: speedup_ci
    assert Interval.from_ends(1.4, None) is None and Interval.from_ends(1.4, (None, None)) is None
    row = {"speedup": 2.0, "speedup_lo": 1.9, "speedup_hi": 2.1}  # a timing row, an export
    assert Interval.from_fields(row, "speedup") == Interval(2.0, 1.9, 2.1)
    assert Interval.from_fields({"speedup": 2.0, "speedup_lo": None, "speedup_hi": None}, "speedup") is None
    assert Interval.from_fields({"mean": 0.5, "lo": -0.1, "hi": 1.2, "items": 8}) == Interval(0.5, -0.1, 1.2)
    assert Interval.from_fields({"mean": 0.5}) is None


def test_bad_intervals_are_refused():
    with pytest.raises(ConfigError, match="`lo` must be <= `hi`"):
        Interval(1.0, 1.2, 1.1)
    with pytest.raises(ConfigError, match="`level` must be in"):
        Interval(1.0, 0.9, 1.1, level=1.0)
    with pytest.raises(ConfigError, match="`factor` must be > 0"):
        Interval(1.0, 0.9, 1.1).scaled(0)
