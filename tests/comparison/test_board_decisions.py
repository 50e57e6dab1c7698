"""The methods board's verdicts by seeded simulation: a table of null rows rarely decides anything (Bonferroni),
and a large lead is decided at the sizes of the committed tables."""

import pytest

from poptune import ConfigError
from poptune.comparison.board_decisions import row_power, table_error
from poptune.evaluate.decisions import Scenario


def test_a_table_without_true_leads_decides_at_most_about_5_percent_of_the_time():
    rates = table_error(Scenario(0.0, 0.3), rows=6, tasks=2, per_task=60, replicates=120, seed=1)
    assert rates.right == 0 and rates.wrong <= 0.05 + 3 * rates.standard_error(0.05)


def test_a_large_lead_is_decided_the_right_way_and_a_small_one_rarely():
    large = row_power(Scenario(0.25, 0.4), rows=13, tasks=5, per_task=96, replicates=40, seed=2)
    assert large.right >= 0.95 and large.wrong == 0
    small = row_power(Scenario(0.02, 0.3), rows=13, tasks=2, per_task=24, replicates=40, seed=2)
    assert small.right <= 0.2 and small.wrong == 0


def test_f1_type_items_are_simulated_too_and_bad_input_is_refused():
    long = row_power(Scenario(0.4, 0.8, partial=True), rows=13, tasks=2, per_task=24, replicates=30, seed=3)
    assert long.right >= 0.8
    with pytest.raises(ConfigError):
        table_error(Scenario(0.1, 0.3), rows=2, tasks=1, per_task=10)
    with pytest.raises(ConfigError):
        row_power(Scenario(0.0, 0.3), rows=2, tasks=1, per_task=10)
    with pytest.raises(ConfigError):
        row_power(Scenario(0.1, 0.3), rows=0, tasks=1, per_task=10)


def test_the_items_a_decision_is_said_to_cost_give_about_the_power_promised():
    import numpy as np

    from poptune.comparison.board import row_confidence
    from poptune.comparison.cost import items_to_decide

    scenario, rows = Scenario(0.1, 0.4), 5
    rng = np.random.default_rng(4)
    drawn = [scenario.draw(rng, 4000) for _ in range(2)]  # a large pilot: the variance of one item's difference
    per_task = items_to_decide({"a": drawn[0][0], "b": drawn[1][0]}, {"a": drawn[0][1], "b": drawn[1][1]}, 10.0,
                               row_confidence(rows))
    assert 60 < per_task < 400
    rates = row_power(scenario, rows=rows, tasks=2, per_task=per_task, replicates=150, seed=5)
    assert abs(rates.right - 0.8) <= 0.1, (per_task, rates.right)
    assert items_to_decide({"a": [1.0, 0.0]}, {"a": [1.0, 0.0]}, 0.0, 0.95) is None


def test_the_cost_command_scores_new_items_into_a_new_record_and_a_tiny_lead_is_not_planned():
    from poptune.comparison.cost import MAX_ITEMS, decision_cost, follow_up

    outcomes = {"a": [1.0, 0.0, 1.0, 0.0] * 4}
    record = {"tasks": ["a"], "_file": "methods-x.json", "skip": 64, "per_task": 16,
              "command": "poptune compare --tasks a --skip 64 --items 16 "
                         "--out /tmp/clone/leaderboards/raw/methods-x.json",
              "methods": [{"name": "pop", "outcomes": outcomes, "score_seconds": 16.0},
                          {"name": "base", "outcomes": {"a": [1.0, 1.0, 0.0, 0.0] * 4}, "score_seconds": 16.0}]}
    cost = decision_cost(record, "pop", "base", 20.0, 0.99)
    # past the 64 + 16 items already scored (never a superset of them), into a record beside the first
    assert cost.command == (f"poptune compare --tasks a --skip 80 --items {cost.per_task} "
                            "--out leaderboards/raw/methods-x-from-80.json")
    again = follow_up({**record, "_file": "methods-x-from-80.json", "skip": 80, "per_task": 300,
                       "command": cost.command}, 500)
    assert again == "poptune compare --tasks a --skip 380 --items 500 --out leaderboards/raw/methods-x-from-380.json"
    assert follow_up({"command": "poptune compare --items 8 --out r.json", "per_task": 8}, 20) == \
        "poptune compare --items 20 --out leaderboards/raw/r-from-8.json --skip 8"
    assert cost.minutes == pytest.approx(2 * cost.per_task / 60)  # one second per item, two methods
    assert decision_cost(record, "pop", "base", 0.01, 0.99).per_task > MAX_ITEMS  # the board says "not decided"
