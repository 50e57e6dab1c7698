"""Intervals that cover what they claim: the order-statistic interval of the median and the A/A equivalence test,
checked against published binomial tables and by seeded simulations (seconds)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from poptune.errors import ConfigError
from poptune.measure.nullcheck import AA_ALPHA, AA_MARGIN, AA_PAIRS, equivalence
from poptune.measure.stats import (
    MIN_PAIRS_95,
    median_ci,
    median_interval_coverage,
    median_rank,
    pairs_for,
)

REPLICATES = 4000


def _slack(p: float) -> float:
    """Three Monte Carlo standard errors of a rate ``p`` over :data:`REPLICATES` replicates."""
    return 3 * math.sqrt(p * (1 - p) / REPLICATES)


@pytest.mark.parametrize(
    ("n", "ranks", "coverage"),
    [
        (6, (1, 6), 0.9688),  # Conover's table of Bin(n, 1/2): 1 - 2 * 0.5**6
        (10, (2, 9), 0.9785),  # 1 - 2 * 11/1024
        (15, (4, 12), 0.9648),
        (20, (6, 15), 0.9586),
    ],
)
def test_ranks_and_coverage_match_the_published_table(n: int, ranks: tuple[int, int], coverage: float) -> None:
    values = [float(i) for i in range(1, n + 1)]  # x_(i) = i
    ci = median_ci(values)
    assert median_rank(n) == ranks[0] and ci.ends() == (float(ranks[0]), float(ranks[1]))
    assert ci.coverage == pytest.approx(coverage, abs=5e-5) and ci.meets and ci.level == 0.95
    assert ci.point == (n + 1) / 2 and ci.contains(ci.point)  # the median of 1..n
    assert median_interval_coverage(n) == ci.coverage
    # One rank further in falls below 95%: the largest k is taken.
    assert 1 - 2 * sum(math.comb(n, j) for j in range(ranks[0] + 1)) / 2**n < 0.95


def test_fewest_pairs_for_a_confidence() -> None:
    assert MIN_PAIRS_95 == pairs_for(0.95) == 6
    assert (pairs_for(0.90), pairs_for(0.99), pairs_for(0.5)) == (5, 8, 2)
    for confidence in (0.8, 0.9, 0.95, 0.99):
        n = pairs_for(confidence)
        assert median_interval_coverage(n, confidence) >= confidence > median_interval_coverage(n - 1, confidence)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_fewer_pairs_give_the_range_with_their_lower_coverage_stated(n: int) -> None:
    values = [1.0 + 0.1 * ((7 * i) % n) for i in range(n)]
    ci = median_ci(values)
    assert ci.ends() == (min(values), max(values)) and median_rank(n) == 1
    assert ci.coverage == pytest.approx(max(0.0, 1 - 2 * 0.5**n)) and ci.coverage < 0.95 and not ci.meets


def _skewed(rng: np.random.Generator, size: tuple[int, int]) -> tuple[np.ndarray, float]:
    """Ratios with a long right tail (a slow member now and then): 1.3 + exponential; median 1.3 + 0.05 ln 2."""
    return 1.3 + rng.exponential(0.05, size), 1.3 + 0.05 * math.log(2)


def _lognormal(rng: np.random.Generator, size: tuple[int, int]) -> tuple[np.ndarray, float]:
    """Ratios exp(N(ln 1.4, 0.2)): median 1.4."""
    return np.exp(rng.normal(math.log(1.4), 0.2, size)), 1.4


@pytest.mark.parametrize("draw", [_lognormal, _skewed])
@pytest.mark.parametrize("n", [6, 8, 15])
def test_the_interval_covers_the_true_median_at_least_as_often_as_it_states(draw, n: int) -> None:
    rng = np.random.default_rng(1000 + n)
    samples, median = draw(rng, (REPLICATES, n))
    hits = 0
    for row in samples:
        ci = median_ci(row.tolist())
        hits += ci.contains(median)
    stated = median_interval_coverage(n)
    rate = hits / REPLICATES
    assert stated >= 0.95
    assert rate >= stated - _slack(stated)  # covers as claimed ...
    assert rate <= stated + _slack(stated)  # ... and exactly so (distribution-free, continuous ratios)


def test_three_pairs_cover_only_what_their_range_states() -> None:
    rng = np.random.default_rng(3)
    samples, median = _lognormal(rng, (REPLICATES, 3))
    rate = float(np.mean([min(r) <= median <= max(r) for r in samples.tolist()]))
    assert median_interval_coverage(3) == 0.75
    assert abs(rate - 0.75) <= _slack(0.75)


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ConfigError, match="at least one value"):
        median_ci([])
    with pytest.raises(ConfigError, match="`confidence` must be in"):
        median_ci([1.0, 2.0], 1.0)
    with pytest.raises(ConfigError, match="`n` must be an integer"):
        median_rank(0)
    with pytest.raises(ConfigError, match="`margin` must be > 0"):
        equivalence([1.0] * 16, margin=0.0)


def _pass_rate(bias: float, sd: float, seed: int, heavy: bool = False) -> float:
    """How often :data:`AA_PAIRS` A/A pairs with log-ratio ``bias`` and spread ``sd`` show equivalence."""
    rng = np.random.default_rng(seed)
    if heavy:  # Student t with 3 degrees of freedom, scaled to the same sd
        noise = rng.standard_t(3, (REPLICATES, AA_PAIRS)) * sd / math.sqrt(3)
    else:
        noise = rng.normal(0.0, sd, (REPLICATES, AA_PAIRS))
    ratios = np.exp(bias + noise)
    return sum(equivalence(row).equivalent for row in ratios.tolist()) / REPLICATES


def test_aa_test_design_is_sixteen_pairs_within_five_percent_at_five_percent_a_side() -> None:
    assert (AA_PAIRS, AA_MARGIN, AA_ALPHA) == (16, 0.05, 0.05)
    eq = equivalence([1.0 + 0.001 * i for i in range(AA_PAIRS)])
    assert eq.speedup.coverage == pytest.approx(0.9232, abs=1e-4) and eq.speedup.meets
    assert eq.speedup.level == 1 - 2 * AA_ALPHA and eq.speedup.ends() == (1.004, 1.011)  # x_(5) and x_(12)
    assert eq.bounds == pytest.approx((1 / 1.05, 1.05)) and eq.equivalent


@pytest.mark.parametrize(("sd", "least"), [(0.02, 0.99), (0.03, 0.99), (0.04, 0.93)])
def test_aa_test_passes_a_machine_without_bias(sd: float, least: float) -> None:
    # Power: the module docstring states 1.00 / 1.00 / 0.95 at 2% / 3% / 4% sd.
    assert _pass_rate(0.0, sd, seed=int(sd * 1000)) >= least


def test_aa_test_passes_heavy_tailed_noise_without_bias() -> None:
    assert _pass_rate(0.0, 0.03, seed=7, heavy=True) >= 0.97


@pytest.mark.parametrize("sd", [0.02, 0.03, 0.04])
@pytest.mark.parametrize("sign", [1, -1])
def test_aa_test_flags_a_true_five_percent_bias(sd: float, sign: int) -> None:
    # Size: at the margin each one-sided sign test rejects with probability P(Bin(16, 1/2) <= 4) = 0.038.
    rate = _pass_rate(sign * math.log(1 + AA_MARGIN), sd, seed=100 + int(sd * 1000) + sign)
    assert rate <= 0.0384 + _slack(0.0384)
    assert _pass_rate(sign * math.log(1.08), sd, seed=200 + int(sd * 1000) + sign) <= 0.01
