"""The simulated pipeline decides as the study's own functions do, and its figures can fail."""

from __future__ import annotations

import numpy as np
import pytest

from poptune.evaluate.vectorsim import BEYOND, FUTILE, UNDECIDED, WITHIN, GridScenario, decide
from poptune.evaluate.workload import rounds
from poptune.tune.certify import attempt_error
from poptune.tune.pipelinesim import (
    F1Grades,
    PipelineScenario,
    Truth,
    _Plans,
    _select,
    accuracy_cost_power,
    simulate_pipelines,
)
from poptune.tune.simulate import _names, _race

CODES = {"within budget": WITHIN, "beyond budget": BEYOND, "futile": FUTILE, "cap": UNDECIDED}


@pytest.mark.parametrize("drop, flips", [(0.0, 0.05), (0.02, 0.10), (0.01, 0.10)])
def test_the_vectorised_races_stop_as_the_real_race_with_its_futility_stop(drop, flips):
    races, cap, alpha = 24, 128, attempt_error(1)
    scenario = GridScenario.binary(drop, flips)
    drawn = scenario.draw(np.random.default_rng(5), (2, races, cap))
    values = np.asarray(scenario.values)
    mine, _ = decide(drawn, values, rounds(32, cap), alpha, 2.0, futility=True)
    names = _names(2)
    real = [CODES[_race({names[t]: (list(0.5 + values[drawn[t, r]] / 2), list(0.5 - values[drawn[t, r]] / 2))
                         for t in range(2)}, start=32, cap=cap, max_drop=2.0, confidence=1 - 2 * alpha,
                        futility=True).stopped] for r in range(races)]
    assert list(mine) == real
    assert len(set(real)) > 1  # not vacuous: the races stop in more than one way


def _searched(rows):
    """One study's search: (verdict, items per task, drop, flips) per configuration, as arrays of one study."""
    return [(np.array([v]), np.array([32]), np.array([d]), np.array([f])) for v, d, f in rows]


def test_the_candidate_is_the_fastest_kept_within_and_a_slower_one_when_its_verdict_is_out_of_reach():
    configs = tuple(Truth(0, 0.05, s) for s in (1.5, 1.4, 1.3, 1.2))
    speeds = np.array([[1.5], [1.4], [1.3], [1.2]])
    scenario = PipelineScenario("t", configs)
    plans = _Plans(scenario, 0.975)
    # rejected; kept but its drop so far over the budget; the candidate; slower
    pick = _select(scenario, _searched([(BEYOND, 0, 9), (UNDECIDED, 3.0, 6), (UNDECIDED, 1.0, 4),
                                        (UNDECIDED, -1.0, 1)]), speeds, 0, plans)
    assert pick is not None and pick[0] == 2 and not pick[2]
    assert pick[1].per_task == plans(32, 4).per_task
    assert _select(scenario, _searched([(BEYOND, 0, 9)] * 4), speeds, 0, plans) is None
    small = PipelineScenario("t", configs, supply=500)  # 4 flips of 64 need 956 per task; 1 flip 450
    pick = _select(small, _searched([(UNDECIDED, 1.0, 4), (UNDECIDED, 0.5, 4), (UNDECIDED, 0.0, 1),
                                     (UNDECIDED, 0.0, 1)]), speeds, 0, _Plans(small, 0.975))
    assert pick is not None and pick[0] == 2 and pick[2]


def test_the_pipelines_error_and_power_are_what_their_truth_makes_them():
    at_budget = simulate_pipelines(PipelineScenario("b", tuple(Truth(2, 0.05, 1.5 - i / 20) for i in range(8))),
                                   pipelines=300, seed=1)
    assert at_budget.wrong == at_budget.within and at_budget.right == 0 and at_budget.candidates > 250
    assert at_budget.wrong <= 12  # 1.25% of 300 is 3.75; 12 is p < 0.001
    clean = simulate_pipelines(PipelineScenario("z", tuple(Truth(0, 0.0, 1.5 - i / 20) for i in range(8))),
                               pipelines=200, seed=2)
    assert clean.zero == clean.candidates == 200 and clean.zero_within == 200 and clean.raw_rate == 0
    assert clean.at_zero == {(0.0, True): (200, 200, pytest.approx(160.0))}  # every plan bought it, promising 80%
    broken = simulate_pipelines(PipelineScenario("x", tuple(Truth(30, 0.3, 1.5 - i / 20) for i in range(8))),
                                pipelines=100, seed=3)
    assert broken.candidates < 5 and broken.within == 0


def test_the_f1_sizing_is_accuracy_costs_and_its_law_has_no_drop():
    grades = F1Grades("t", 0.3, 0.4, 0.2)
    law = grades.differences()
    assert sum(law.probabilities) == pytest.approx(1.0) and law.drop == pytest.approx(0.0, abs=1e-12)
    sizes, share = accuracy_cost_power(grades, graded=128, replicates=2, races=30, seed=4)
    assert len(sizes) == 2 and all(s > 300 for s in sizes) and 0.4 < share <= 1.0
