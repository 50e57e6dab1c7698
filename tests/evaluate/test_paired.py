"""Paired drops: the interval on hand-made samples, its sign conventions and its refusals."""

import math

import numpy as np
import pytest

from poptune import ConfigError
from poptune.evaluate.paired import PairedDrop, paired_drop


def test_interval_on_a_hand_made_paired_sample():
    full = [1.0] * 60 + [0.0] * 40
    pop = list(full)
    for i in range(0, 50, 5):  # ten correct items become wrong: a 10-point drop
        pop[i] = 0.0
    drop = paired_drop({"t": full}, {"t": pop}, seed=0)
    assert drop.mean == pytest.approx(10.0)
    assert drop.items == {"t": 100} and drop.flipped == {"t": 10}
    # the normal approximation of the paired mean: 10 +- 1.96 * sd(d) / sqrt(n) points
    d = 100 * (np.array(full) - np.array(pop))
    half = 1.96 * d.std(ddof=1) / math.sqrt(len(d))
    assert drop.lo == pytest.approx(10 - half, abs=1.5) and drop.hi == pytest.approx(10 + half, abs=1.5)
    assert 0 < drop.lo < 10 < drop.hi < 20
    assert paired_drop({"t": full}, {"t": pop}, seed=0) == drop  # seeded: the same interval every run
    assert drop.within(drop.hi) and not drop.within(drop.hi - 0.01)
    assert drop.beyond(drop.lo - 0.01) and not drop.beyond(drop.lo)


def test_pairing_makes_the_interval_narrow_where_items_agree():
    full = [1.0, 0.0] * 50
    same = paired_drop({"t": full}, {"t": list(full)})
    assert (same.mean, same.lo, same.hi) == (0.0, 0.0, 0.0)  # no item changed: no uncertainty about the drop


def test_tasks_are_resampled_within_themselves_and_averaged():
    full = {"a": [1.0] * 40, "b": [1.0] * 10}
    pop = {"a": [0.0] * 40, "b": [1.0] * 10}  # task a loses 100 points, task b nothing: mean over tasks 50
    drop = paired_drop(full, pop)
    assert drop.mean == pytest.approx(50.0) and drop.lo == drop.hi == pytest.approx(50.0)
    assert drop.items == {"a": 40, "b": 10}


def test_lower_is_better_metrics_count_an_increase_as_a_drop():
    drop = paired_drop({"bpb": [1.0, 1.2, 0.9]}, {"bpb": [1.1, 1.3, 1.0]}, lower_is_better=["bpb"], scale=1.0)
    assert drop.mean == pytest.approx(0.1)


def test_round_trip_and_refusals():
    drop = paired_drop({"t": [1.0, 0.0, 1.0, 1.0]}, {"t": [0.0, 0.0, 1.0, 1.0]})
    assert PairedDrop.from_dict(drop.to_dict()) == drop
    with pytest.raises(ConfigError, match="same items"):
        paired_drop({"t": [1.0, 0.0]}, {"t": [1.0]})
    with pytest.raises(ConfigError, match="same tasks"):
        paired_drop({"t": [1.0]}, {"u": [1.0]})
