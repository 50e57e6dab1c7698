"""A resumed study's evaluator records the full model's states of its stored items, replays them, and checks them."""

from __future__ import annotations

import pytest

from poptune import MeasurementError, PopConfig
from poptune.problem.evaluator import ConfigEvaluator
from poptune.problem.problem import TuningProblem

CONFIG = PopConfig(skip=2, boundary="last")


@pytest.fixture
def problem():
    return TuningProblem(model="tiny-llama", tasks=("passkey",), max_drop=None, limit=4, items_start=4, lengths=(320,),
                         latency_points=0, repeats=1, precision=None, decode_tokens=0)


def _evaluator(problem, shared, stored=None):
    evaluator = ConfigEvaluator(problem, model=shared("tiny-llama"))
    evaluator.enable_state_reuse()
    if stored is not None:
        evaluator.restore_full_run(stored)
    return evaluator


def test_a_resumed_evaluator_replays_the_stored_items_and_measures_the_same(problem, shared):
    first = _evaluator(problem, shared)
    measured = first.evaluate(CONFIG)
    assert first.states.replayed > 0

    resumed = _evaluator(problem, shared, first.stored_full_run())
    again = resumed.evaluate(CONFIG)
    assert resumed.states.recorded > 0 and resumed.states.replayed == first.states.replayed
    assert again.outcomes == measured.outcomes and again.drop == measured.drop
    recorded = resumed.states.recorded
    resumed.evaluate(PopConfig(skip=1, boundary="none"))  # recorded once per process
    assert resumed.states.recorded == recorded


def test_a_stored_reference_the_full_model_no_longer_computes_fails_the_trial(problem, shared):
    first = _evaluator(problem, shared)
    first.full_run()
    stored = first.stored_full_run()
    stored["outcomes"]["passkey"][1] = 1.0 - stored["outcomes"]["passkey"][1]

    with pytest.raises(MeasurementError, match="no longer scores passkey items \\[.*\\] as the study stored"):
        _evaluator(problem, shared, stored).evaluate(CONFIG)
