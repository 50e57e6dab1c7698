"""Decision rules checked by seeded simulation: the error they claim is the error they make, and they decide
when the answer is clear (issues 32 and 45)."""

import pytest

from poptune import ConfigError
from poptune.evaluate.decisions import PARTIAL_MEAN, Scenario, race_error
from poptune.evaluate.paired import SEQUENTIAL, PairedDrop
from poptune.evaluate.racing import verdict_cost

REPLICATES = 600

AT_BUDGET = [Scenario(0.02, 0.05), Scenario(0.02, 0.10), Scenario(0.02, 0.20), Scenario(0.02, 0.02, losses_only=True),
             Scenario(0.02, 0.10, partial=True), Scenario(0.02, 0.02 / PARTIAL_MEAN, losses_only=True, partial=True)]


@pytest.mark.parametrize("scenario", AT_BUDGET, ids=lambda s: s.label)
def test_within_budget_is_declared_at_most_2_5_percent_of_the_time_when_the_drop_equals_the_budget(scenario):
    # The racing of a study: two tasks, 16 -> 32 -> 64 items per task, a look after every round.
    rates = race_error(scenario, start=16, cap=64, max_drop=2.0, replicates=REPLICATES, seed=1)
    assert rates.within <= 0.025 + 3 * rates.standard_error(0.025), rates
    assert rates.beyond <= 0.025 + 3 * rates.standard_error(0.025), rates


def test_a_longer_race_at_the_budget_keeps_its_error_too():
    # The standard certification's scale: 32 -> 128 items per task over three looks.
    rates = race_error(Scenario(0.02, 0.10), start=32, cap=128, replicates=REPLICATES, seed=2)
    assert rates.within <= 0.025 + 3 * rates.standard_error(0.025), rates
    assert rates.beyond <= 0.025 + 3 * rates.standard_error(0.025), rates


def test_a_configuration_that_loses_nothing_is_certified_by_2500_items_at_10_percent_flips():
    # The power a planned design owes: a one-look test needs about 1,960 items for 80% here; the betting
    # confidence sequence this replaced certified 16% of such races at 1,024 items and needed about 8,200.
    rates = race_error(Scenario(0.0, 0.10), start=32, cap=1250, replicates=300, seed=3)
    assert rates.within >= 0.80, rates  # observed 0.89 (standard error 0.02)
    assert rates.beyond == 0.0 and rates.mean_items < 2500


@pytest.mark.parametrize("flips", [0.10, 0.20])
def test_the_items_a_verdict_is_said_to_need_give_the_power_promised(flips):
    # What an undecided row prints: the items per task a race needs for 80% power at the observed flip rate.
    # Sized from a search race of 200 items per task, then run to that cap: it decides about 80% of the time.
    seen = PairedDrop(0.0, -3.0, 3.0, {"a": 200, "b": 200}, {"a": round(200 * flips), "b": round(200 * flips)},
                      SEQUENTIAL)
    cost = verdict_cost(seen, 2.0, planned=128, start=32)
    rates = race_error(Scenario(0.0, flips), start=32, cap=cost.per_task, replicates=800, seed=4)
    assert 0.80 - 3 * rates.standard_error(0.8) <= rates.within <= 0.92, (cost, rates)


def test_a_lossless_configuration_is_certified_once_there_are_enough_items():
    # No item flips: the upper bound falls below 2 points after about 240 items (the exact one-look bound: 183).
    assert race_error(Scenario(0.0, 0.0), start=32, cap=128, replicates=20).within == 1.0
    assert race_error(Scenario(0.0, 0.0), start=16, cap=64, replicates=20).within == 0.0  # 128 items are too few


def test_a_broken_configuration_is_rejected_by_the_second_round():
    # O'Brien-Fleming spending keeps the first look (a quarter of the items) for overwhelming evidence only.
    rates = race_error(Scenario(0.5, 0.5, losses_only=True), start=16, cap=64, replicates=50)
    assert rates.beyond == 1.0 and rates.mean_items <= 64


def test_scenarios_refuse_impossible_rates():
    with pytest.raises(ConfigError, match="drop"):
        Scenario(0.1, 0.05)
    with pytest.raises(ConfigError, match="losses only"):
        Scenario(0.02, 0.05, losses_only=True)
