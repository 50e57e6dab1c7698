"""The full model's trial interrupted (Ctrl-C) or its worker killed (kill -9): queued again like any other trial and
measured by the resuming process, which never waits for it itself (issue 87, points 1 and 2). A synthetic
evaluator stands in for the model."""

from __future__ import annotations

import signal
import time

import optuna
import pytest
from optuna.trial import TrialState

from poptune import PopConfig, store
from poptune.env import TuningProblem
from poptune.problem.space import paper_default
from poptune.tune import objective as objective_module
from poptune.tune.interrupt import INTERRUPTED, Interrupted, requeue_lost
from poptune.tune.study import StudySpec, run_study

from .fakes import LAYERS, FakeEvaluator, quiet_timing  # noqa: F401  (the fixture is autouse: no real A/A pairs)

optuna.logging.set_verbosity(optuna.logging.WARNING)

FULL = PopConfig(skip=0)


class InterruptedAtFullModel(FakeEvaluator):
    """Ctrl-C while the full model's trial measures (the first time only)."""

    interrupted = False

    def evaluate(self, config: PopConfig):
        if config == FULL and not InterruptedAtFullModel.interrupted:
            InterruptedAtFullModel.interrupted = True
            raise Interrupted(signal.SIGINT)
        return super().evaluate(config)

    def seconds_per_item(self) -> float:
        """Known from the start: a batch of two is asked at once (the full model's retry beside the paper's)."""
        return 0.01

    def race_together(self, configs) -> None:
        """Nothing to race in a synthetic measurement."""


@pytest.fixture
def problem():
    return TuningProblem(model="tiny-llama", max_drop=None, tasks=("piqa",), lengths=(16,), decode_tokens=8)


@pytest.fixture(autouse=True)
def no_endless_wait(monkeypatch):
    """A worker waiting for a trial only it could run looks at the study for ever: fail after 40 looks."""
    looks, real = [], objective_module.fail_stale

    def counted(study):
        looks.append(1)
        if len(looks) > 40:
            raise AssertionError("the worker waits for a trial no one runs")
        real(study)

    monkeypatch.setattr(objective_module, "fail_stale", counted)
    InterruptedAtFullModel.interrupted = False


def _measured(study) -> list[PopConfig]:
    return [PopConfig.from_dict(t.user_attrs["config"]) for t in store.completed(study)
            if not {"reused_from", "remeasure_of"} & set(t.user_attrs)]


@pytest.mark.parametrize("batch", [1, 2])
def test_ctrl_c_in_the_full_models_trial_queues_it_again_and_the_resume_measures_it(problem, tmp_path, batch):
    spec = StudySpec(problem=problem, trials=3, storage=f"sqlite:///{tmp_path}/s.db", confirm=False, batch=batch)
    with pytest.raises(KeyboardInterrupt):
        run_study(spec, evaluator=InterruptedAtFullModel(problem))
    stored = optuna.load_study(study_name=store.study_names(store.open_storage(spec.storage, heartbeat=None))[0],
                               storage=spec.storage)
    queued = [t.system_attrs["fixed_params"] for t in stored.get_trials(states=(TrialState.WAITING,))]
    assert {"skip": 0} in queued  # queued again at once, as any interrupted trial is
    study = run_study(spec, evaluator=InterruptedAtFullModel(problem))
    first = study.trials[0]
    assert first.state == TrialState.FAIL and first.user_attrs["fail_reason"] == INTERRUPTED
    measured = _measured(study)
    assert FULL in measured and paper_default(LAYERS) in measured and len(measured) == len(set(measured)) == 3
    assert store.StoredStudy.of(study).references  # the study's reference written


def test_a_study_that_lost_its_full_models_trial_gets_it_back_on_resume(problem, tmp_path):
    """A study interrupted in the full model's trial before it was queued again (nothing waits for it)."""
    url = f"sqlite:///{tmp_path}/s.db"
    spec = StudySpec(problem=problem, trials=2, storage=url, confirm=False)
    with pytest.raises(KeyboardInterrupt):
        run_study(spec, evaluator=InterruptedAtFullModel(problem))
    study = optuna.load_study(study_name=store.study_names(store.open_storage(url, heartbeat=None))[0], storage=url)
    for trial in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        if trial.system_attrs.get("fixed_params") == {"skip": 0}:  # what the old code never wrote
            study._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
    assert requeue_lost(study) == [0] and requeue_lost(study) == []  # once
    study = run_study(StudySpec(problem=problem, add=2, storage=url, confirm=False),
                      evaluator=FakeEvaluator(problem))
    assert FULL in _measured(study)


def test_kill_9_in_the_full_models_trial_is_measured_on_resume_without_waiting(problem, tmp_path, monkeypatch):
    """A worker killed while the full model's trial ran (a trial that never beats): its retry is queued after the
    paper's configuration, which must not wait for it (only this process could run it)."""
    from poptune.tune import study as study_module

    url = f"sqlite:///{tmp_path}/s.db"
    monkeypatch.setattr(study_module, "_work", lambda *a, **k: None)  # the study made, its first trials queued
    run_study(StudySpec(problem=problem, trials=3, storage=url, heartbeat_s=1, confirm=False),
              evaluator=FakeEvaluator(problem))
    monkeypatch.undo()
    ghost = optuna.load_study(study_name=store.study_names(store.open_storage(url, heartbeat=None))[0],
                              storage=url).ask()  # Optuna's plain storage: it never beats, as if killed
    assert ghost.number == 0 and ghost._cached_frozen_trial.system_attrs["fixed_params"] == {"skip": 0}
    time.sleep(4.5)  # past the grace period of three 1 s beats (SQLite's clock has whole seconds)
    study = run_study(StudySpec(problem=problem, trials=3, storage=url, heartbeat_s=1, confirm=False),
                      evaluator=FakeEvaluator(problem))
    assert study.trials[0].state == TrialState.FAIL
    measured = _measured(study)
    assert FULL in measured and len(measured) == len(set(measured)) == 3
    assert not study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
