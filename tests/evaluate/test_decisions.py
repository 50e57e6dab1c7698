"""Decision rules checked by seeded simulation: the error they claim is the error they make (issue 32)."""

import pytest

from poptune import ConfigError
from poptune.evaluate.decisions import Scenario, race_error

REPLICATES = 600

AT_BUDGET = [Scenario(0.02, 0.05), Scenario(0.02, 0.10), Scenario(0.02, 0.20), Scenario(0.02, 0.02, losses_only=True)]


@pytest.mark.parametrize("scenario", AT_BUDGET, ids=lambda s: s.label)
def test_within_budget_is_declared_at_most_2_5_percent_of_the_time_when_the_drop_equals_the_budget(scenario):
    # The racing of a study: two tasks, 16 -> 32 -> 64 items per task, a look after every round.
    rates = race_error(scenario, start=16, cap=64, max_drop=2.0, replicates=REPLICATES, seed=1)
    assert rates.within <= 0.025 + 3 * rates.standard_error(0.025), rates
    assert rates.beyond <= 0.025 + 3 * rates.standard_error(0.025), rates


def test_a_longer_race_at_the_budget_keeps_its_error_too():
    # Certification's scale: up to 256 items per task over four looks, where most races end decided.
    rates = race_error(Scenario(0.02, 0.05), start=32, cap=256, replicates=200, seed=2)
    assert rates.within <= 0.025 + 3 * rates.standard_error(0.025), rates


def test_a_lossless_configuration_is_certified_once_there_are_enough_items():
    # No item flips: the upper end falls below 2 points after about 250 items (two tasks of 128).
    assert race_error(Scenario(0.0, 0.0), start=32, cap=128, replicates=20).within == 1.0
    assert race_error(Scenario(0.0, 0.0), start=16, cap=64, replicates=20).within == 0.0  # 128 items are too few


def test_a_broken_configuration_is_rejected_in_the_first_round():
    rates = race_error(Scenario(0.5, 0.5, losses_only=True), start=16, cap=64, replicates=50)
    assert rates.beyond == 1.0 and rates.mean_items == 32


def test_scenarios_refuse_impossible_rates():
    with pytest.raises(ConfigError, match="drop"):
        Scenario(0.1, 0.05)
    with pytest.raises(ConfigError, match="losses only"):
        Scenario(0.02, 0.05, losses_only=True)
