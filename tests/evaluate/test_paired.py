"""Paired drops: the interval on hand-made samples, its sign conventions and its refusals."""

import math

import numpy as np
import pytest

from poptune import ConfigError
from poptune.evaluate.paired import BETTING, BOOTSTRAP, IDENTICAL, PairedDrop, paired_drop


def test_interval_on_a_hand_made_paired_sample():
    full = [1.0] * 60 + [0.0] * 40
    pop = list(full)
    for i in range(0, 60, 6):  # ten correct items, spread over the order, become wrong: a 10-point drop
        pop[i] = 0.0
    drop = paired_drop({"t": full}, {"t": pop}, seed=0)
    assert drop.mean == pytest.approx(10.0) and drop.method == BETTING
    assert drop.items == {"t": 100} and drop.flipped == {"t": 10} and drop.losses == {"t": 10}
    # Valid at every look, so wider than a one-look interval: the exact Clopper-Pearson interval of 10 losses in
    # 100 items (a 10-point drop with no gain) is [4.90, 17.62] (Clopper and Pearson 1934; e.g. R's
    # binom.test(10, 100)); the confidence sequence must contain it.
    assert drop.lo <= 4.90 and drop.hi >= 17.62
    assert 0 < drop.lo < 10 < drop.hi < 30
    assert paired_drop({"t": full}, {"t": pop}, seed=0) == drop  # deterministic
    assert drop.within(drop.hi) and not drop.within(drop.hi - 0.01)
    assert drop.beyond(drop.lo - 0.01) and not drop.beyond(drop.lo)


def test_no_flipped_item_never_collapses_the_interval():
    # No item changed in 32: the exact 97.5% bound on the flip rate at one look is 1 - 0.025 ** (1 / 32) = 10.9
    # points; an interval valid at every look can only be wider, never [0, 0].
    same = paired_drop({"t": [1.0, 0.0] * 16}, {"t": [1.0, 0.0] * 16})
    assert same.mean == 0.0 and same.flipped == {"t": 0}
    assert same.hi >= 100 * (1 - 0.025 ** (1 / 32)) > 10.88 and same.lo <= -10.88
    # ... and it narrows as items accumulate: below the 2-point budget after about 250 unchanged items.
    assert paired_drop({"t": [1.0] * 260}, {"t": [1.0] * 260}).hi < 2.0 < paired_drop({"t": [1.0] * 200},
                                                                                       {"t": [1.0] * 200}).hi


def test_losses_only_leave_the_lower_end_above_zero_and_the_upper_end_open():
    full = [1.0] * 64
    pop = [0.0 if i % 16 == 0 else 1.0 for i in range(64)]  # four losses, no gain
    drop = paired_drop({"t": full}, {"t": pop})
    assert drop.mean == pytest.approx(6.25) and drop.hi > 6.25 + 10  # not closed at the observed losses
    assert drop.lo < 6.25


def test_the_full_model_against_itself_is_exactly_zero():
    drop = PairedDrop.identical({"a": 32, "b": 32})
    assert (drop.mean, drop.lo, drop.hi, drop.method) == (0.0, 0.0, 0.0, IDENTICAL)


def test_tasks_share_one_sequence_and_are_averaged():
    full = {"a": [1.0] * 40, "b": [1.0] * 40}
    pop = {"a": [0.0] * 40, "b": [1.0] * 40}  # task a loses 100 points, task b nothing: mean over tasks 50
    drop = paired_drop(full, pop)
    assert drop.mean == pytest.approx(50.0) and drop.lo < 50.0 < drop.hi
    assert drop.items == {"a": 40, "b": 40}
    unequal = paired_drop({"a": [1.0] * 40, "b": [1.0] * 10}, {"a": [0.0] * 40, "b": [1.0] * 10})
    assert unequal.mean == pytest.approx(50.0) and unequal.lo < 50.0 < unequal.hi  # Bonferroni over tasks


def test_lower_is_better_metrics_count_an_increase_as_a_drop():
    drop = paired_drop({"bpb": [1.0, 1.2, 0.9]}, {"bpb": [1.1, 1.3, 1.0]}, lower_is_better=["bpb"], scale=1.0)
    assert drop.mean == pytest.approx(0.1) and drop.method == BOOTSTRAP  # unbounded: the approximate bootstrap


def test_round_trip_and_refusals():
    drop = paired_drop({"t": [1.0, 0.0, 1.0, 1.0]}, {"t": [0.0, 0.0, 1.0, 1.0]})
    assert PairedDrop.from_dict(drop.to_dict()) == drop
    with pytest.raises(ConfigError, match="same items"):
        paired_drop({"t": [1.0, 0.0]}, {"t": [1.0]})
    with pytest.raises(ConfigError, match="same tasks"):
        paired_drop({"t": [1.0]}, {"u": [1.0]})
