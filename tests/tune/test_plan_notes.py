"""A run says what it will not do as asked (issue 57): enqueued configurations beyond its budget, and another
sampler than the study's so far. A synthetic evaluator stands in for the model (see ``fakes``)."""

from __future__ import annotations

import logging

import optuna

from poptune.engine import PopConfig
from poptune.env import TuningProblem
from poptune.tune.study import StudySpec, run_study

from .fakes import FakeEvaluator, quiet_timing  # noqa: F401  (the fixture is autouse)

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _run(tmp_path, **spec):
    problem = TuningProblem(model="tiny-llama", tasks=("piqa",), lengths=(16,), decode_tokens=8, max_drop=None)
    return run_study(StudySpec(problem=problem, storage=f"sqlite:///{tmp_path}/s.db", **spec),
                     evaluator=FakeEvaluator(problem))


def test_an_enqueued_configuration_beyond_the_budget_is_said_to_wait(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="poptune"):
        _run(tmp_path, trials=2, sampler="random", enqueue=(PopConfig(skip=3, boundary="last", offset=0),))
    notes = [r.getMessage() for r in caplog.records if "enqueued configurations wait" in r.getMessage()]
    assert notes and "1 of them (the last enqueued) are not measured now" in notes[0]


def test_another_sampler_on_resume_is_said_to_propose_from_here_on(tmp_path, caplog):
    _run(tmp_path, trials=2, sampler="random")
    with caplog.at_level(logging.WARNING, logger="poptune"):
        study = _run(tmp_path, trials=3, sampler="tpe")
    assert any("searched by the random sampler so far; from here on tpe proposes" in r.getMessage()
               for r in caplog.records)
    assert study.user_attrs["sampler"] == "tpe"
