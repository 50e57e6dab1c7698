"""The block-level check of calibrated K/V: its cut points, its decision, and its error rate, simulated."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from poptune.kvfit.check import ALPHA, MIN_WINDOWS, cut_ends, keep_maps

REPLICATES = 4000


def _keep_rate(draw, windows: int, seed: int) -> float:
    """How often the check keeps maps whose windows' calibrated - own values are ``draw(rng, windows)``."""
    rng = np.random.default_rng(seed)
    return sum(keep_maps(draw(rng, windows).tolist())["keep"] for _ in range(REPLICATES)) / REPLICATES


def _bound(rate: float) -> float:
    """``rate`` plus three Monte Carlo standard errors at ``REPLICATES``."""
    return rate + 3 * math.sqrt(rate * (1 - rate) / REPLICATES)


@pytest.mark.parametrize("windows", [3, 5, 16, 40])
def test_maps_no_better_are_kept_at_most_alpha_of_the_time(windows):
    """The stated error rate, simulated with a seed: window values with a true mean of 0 (normal, and heavy
    tailed: Student t with 3 degrees of freedom) are kept at most ``ALPHA`` of the time, up to Monte Carlo error;
    worse maps (true mean +0.2 sd) less often still. A rule "mean below 0" would keep half of them."""
    normal = _keep_rate(lambda rng, n: rng.normal(0.0, 1.0, n), windows, seed=windows)
    heavy = _keep_rate(lambda rng, n: rng.standard_t(3, n), windows, seed=100 + windows)
    worse = _keep_rate(lambda rng, n: rng.normal(0.2, 1.0, n), windows, seed=200 + windows)
    assert normal <= _bound(ALPHA) and heavy <= _bound(ALPHA)
    assert normal >= ALPHA - 3 * math.sqrt(ALPHA * (1 - ALPHA) / REPLICATES)  # exact for normal values, not timid
    assert worse < normal


def test_maps_clearly_better_are_kept():
    """Power: a true mean of -1 sd over 16 windows is kept nearly always (the t-test's power there is > 0.99)."""
    assert _keep_rate(lambda rng, n: rng.normal(-1.0, 1.0, n), 16, seed=7) > 0.98


def test_the_decision_states_its_method_and_says_undecided():
    better = keep_maps([-0.3, -0.2, -0.25, -0.1])
    assert better["keep"] and better["verdict"] == "better" and better["p"] < ALPHA and better["t"] < 0
    assert better["calibrated_minus_own"] == pytest.approx(-0.2125) and "t-test" in better["method"]
    values = [-0.3, 0.2, -0.1, 0.15]
    unsure = keep_maps(values)
    assert not unsure["keep"] and unsure["verdict"] == "undecided" and unsure["p"] > ALPHA
    assert not keep_maps([-1.0] * (MIN_WINDOWS - 1))["keep"]  # too few windows to test: the layers' own
    assert keep_maps([-0.1] * MIN_WINDOWS)["keep"] and not keep_maps([0.0] * MIN_WINDOWS)["keep"]  # no spread
    assert not keep_maps([-0.3, -0.2, -0.25, -0.1], alpha=0.001)["keep"]  # the level is the caller's
    reference = stats.ttest_1samp(values, 0.0, alternative="less")  # the same test as scipy's
    assert unsure["p"] == pytest.approx(float(reference.pvalue)) and unsure["t"] == pytest.approx(reference.statistic)


@pytest.mark.parametrize(("length", "points", "expected"), [
    (512, 4, [128, 256, 384, 512]),
    (64, 4, [32, 48, 64]),  # each end leaves 16 tokens of context at least
    (40, 4, [40]),
    (20, 4, [20]),  # too short for two ends: the whole window
    (512, 1, [512]),
])
def test_cut_ends_spread_over_the_window_and_keep_a_context(length, points, expected):
    assert cut_ends(length, 16, points) == expected
