"""The group-sequential boundaries pinned to textbook values, and their crossing probability checked by Monte
Carlo on Brownian paths (issue 58, item 5)."""

import math

import numpy as np
import pytest

from poptune import ConfigError
from poptune.evaluate.groupseq import (
    OBRIEN_FLEMING,
    POCOCK,
    boundaries,
    crossing_probability,
    drift_for_power,
    hwang_shih_decani,
    spent,
)

FIVE = [0.2, 0.4, 0.6, 0.8, 1.0]


def test_one_look_is_the_fixed_size_test():
    assert boundaries([1.0], 0.025)[0] == pytest.approx(1.959964, abs=1e-5)
    assert boundaries([1.0], 0.025, hwang_shih_decani(-2))[0] == pytest.approx(1.959964, abs=1e-5)
    assert drift_for_power([1.0], 0.025, 0.8) == pytest.approx(1.959964 + 0.841621, abs=1e-4)


def test_five_equal_looks_give_the_textbook_obrien_fleming_type_boundaries():
    # Lan-DeMets O'Brien-Fleming-type spending, one-sided 2.5%, five equal looks (docs/statistics.md quotes them)
    assert boundaries(FIVE, 0.025) == pytest.approx((4.877, 3.357, 2.680, 2.290, 2.031), abs=1.5e-3)
    # alpha(t) = 2 - 2 Phi(z_(1 - alpha/2) / sqrt(t)): at half the information, z_0.9875 = 2.241403 over sqrt(0.5)
    assert spent(0.5, 0.025) == pytest.approx(1 - math.erf(2.241403 / math.sqrt(0.5) / math.sqrt(2)), abs=1e-6)
    assert spent(1.0, 0.025) == 0.025 and spent(0.0, 0.025) == 0.0


def _paths(ts, drift, count, seed):
    rng = np.random.default_rng(seed)
    steps = np.diff([0.0, *ts])
    increments = rng.standard_normal((count, len(ts))) * np.sqrt(steps) + drift * steps
    return np.cumsum(increments, axis=1) / np.sqrt(ts)  # Z_k = B(t_k) / sqrt(t_k)


@pytest.mark.parametrize("spending", [OBRIEN_FLEMING, hwang_shih_decani(-2), POCOCK])
@pytest.mark.parametrize("ts", [FIVE, [32 / 1250, 64 / 1250, 128 / 1250, 256 / 1250, 512 / 1250, 1024 / 1250, 1.0],
                                [32 / 72, 64 / 72, 1.0]], ids=["five", "cap-1250", "cap-72"])
def test_the_simulated_crossing_probability_is_the_designs(ts, spending):
    cs = np.asarray(boundaries(ts, 0.025, spending))
    z = _paths(np.asarray(ts), 0.0, 400_000, seed=58)
    share = float(np.mean(np.any(z >= cs, axis=1)))
    assert abs(share - 0.025) <= 4 * math.sqrt(0.025 * 0.975 / 400_000), share  # 0.1 point
    drift = drift_for_power(ts, 0.025, 0.8, spending)
    z = _paths(np.asarray(ts), drift, 200_000, seed=59)
    power = float(np.mean(np.any(z >= cs, axis=1)))
    assert abs(power - 0.8) <= 4 * math.sqrt(0.8 * 0.2 / 200_000), power
    assert crossing_probability(ts, 0.025, drift, spending) == pytest.approx(0.8, abs=1e-4)


def test_bad_designs_are_refused():
    with pytest.raises(ConfigError):
        boundaries([0.5, 0.5], 0.025)
    with pytest.raises(ConfigError):
        boundaries([1.0], 0.6)
    with pytest.raises(ConfigError):
        boundaries([1.0], 0.025, "nonsense")
