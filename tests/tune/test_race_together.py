"""A batch of a study's trials raced together measures what each trial measures alone."""

from __future__ import annotations

import pytest

from poptune import MeasurementError, PopConfig
from poptune.problem.evaluator import ConfigEvaluator
from poptune.problem.problem import TuningProblem

from .test_evaluator_resume import _evaluator

CONFIGS = [PopConfig(skip=2, boundary="last"), PopConfig(skip=1, boundary="none"), PopConfig(skip=3)]


@pytest.fixture
def problem():
    return TuningProblem(model="tiny-llama", tasks=("passkey", "kv_recall"), max_drop=None, limit=8,
                         items_start=4, lengths=(320,), latency_points=0, repeats=1, precision=None,
                         decode_tokens=0)


def _raced(evaluator, monkeypatch):
    """``CONFIGS`` raced together, then evaluated: none races again."""
    evaluator.race_together(CONFIGS)
    monkeypatch.setattr(evaluator, "race_accuracy", lambda *a, **k: pytest.fail("raced again"))
    return {c: evaluator.evaluate(c) for c in CONFIGS}


@pytest.mark.parametrize("full_first", [True, False])
def test_configurations_raced_together_measure_what_each_measures_alone(problem, shared, monkeypatch, full_first):
    # full_first: the full model scored the first round's items before (a study's full-model trial); otherwise
    # its scoring of every round's items leads the batch for the peers, recording the study's states
    alone = _evaluator(problem, shared)
    expected = {c: alone.evaluate(c) for c in CONFIGS}
    together = _evaluator(problem, shared)
    if full_first:
        together.full_run()
    got = _raced(together, monkeypatch)
    for config in CONFIGS:
        assert got[config].outcomes == expected[config].outcomes, config
        assert got[config].drop == expected[config].drop, config
    assert together.states.replayed > 0  # the peers replayed the full model's states


def test_a_resumed_batch_records_and_checks_the_stored_items_once(problem, shared, monkeypatch):
    first = _evaluator(problem, shared)
    expected = {c: first.evaluate(c) for c in CONFIGS}
    resumed = _evaluator(problem, shared, first.stored_full_run())
    got = _raced(resumed, monkeypatch)
    assert all(got[c].outcomes == expected[c].outcomes for c in CONFIGS)
    assert resumed.states.recorded > 0 and resumed.states.replayed > 0

    stored = first.stored_full_run()
    stored["outcomes"]["passkey"][1] = 1.0 - stored["outcomes"]["passkey"][1]
    with pytest.raises(MeasurementError, match="no longer scores passkey items"):
        _evaluator(problem, shared, stored).race_together(CONFIGS)


@pytest.mark.integration
def test_gemma_configurations_raced_together_measure_what_each_measures_alone(shared, monkeypatch):
    # Real answers, which the configurations flip differently (skip 12 loses most of them): a result handed to
    # another configuration, or a race scored on another's outputs, shows here.
    problem = TuningProblem(model="gemma-3", max_drop=None, limit=8, items_start=8, lengths=(256,),
                            latency_points=0, repeats=1, precision=None, decode_tokens=0)
    configs = [PopConfig(skip=12, boundary="none"), PopConfig(skip=6), PopConfig(skip=4, boundary="window-64")]
    alone = ConfigEvaluator(problem, model=shared("gemma-3"))
    alone.enable_state_reuse()
    expected = {c: alone.evaluate(c) for c in configs}
    assert len({str(m.outcomes) for m in expected.values()}) > 1  # the check can tell them apart
    together = ConfigEvaluator(problem, model=shared("gemma-3"))
    together.enable_state_reuse()
    together.race_together(configs)
    monkeypatch.setattr(together, "race_accuracy", lambda *a, **k: pytest.fail("raced again"))
    for config in configs:
        assert together.evaluate(config).outcomes == expected[config].outcomes, config
