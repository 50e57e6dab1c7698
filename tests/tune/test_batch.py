"""Trials asked in batches, their accuracy raced together: the measurements of one trial at a time."""

from __future__ import annotations

import optuna
import pytest

from poptune import ConfigError, PopConfig, store
from poptune.env import TuningProblem
from poptune.problem.evaluator import ConfigEvaluator
from poptune.tune.interrupt import INTERRUPTED
from poptune.tune.study import StudySpec, run_study

optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.fixture
def problem(eval_data):
    return TuningProblem(model="tiny-llama", max_drop=None, tasks=("piqa", "passkey"), limit=4,
                         data_dir=str(eval_data), lengths=(260,), repeats=1, decode_tokens=0, precision=None)


def _measured(study):
    """Each measured configuration's accuracy figures (latency is timed, so it differs run to run)."""
    return {
        str(PopConfig.from_dict(t.user_attrs["config"])): (t.values[1], t.user_attrs["drop"], t.user_attrs["items"])
        for t in store.completed(study) if "remeasure_of" not in t.user_attrs}


def test_a_batched_grid_measures_what_one_trial_at_a_time_measures(problem, tmp_path, monkeypatch):
    raced: list[list[PopConfig]] = []
    race = ConfigEvaluator.race_together
    monkeypatch.setattr(ConfigEvaluator, "race_together", lambda self, configs: raced.append(list(configs))
                        or race(self, configs))
    spec = StudySpec(problem=problem, trials=5, sampler="grid", confirm=False)
    one = run_study(StudySpec(**{**spec.__dict__, "storage": f"sqlite:///{tmp_path}/one.db"}))
    assert raced == []
    batched = run_study(StudySpec(**{**spec.__dict__, "storage": f"sqlite:///{tmp_path}/batched.db", "batch": 3}))
    # the full model and the paper's rule alone (the cost of an item beside the full model is measured so),
    # then the grid's next three raced together
    assert len(raced) == 1 and len(raced[0]) == 3
    assert _measured(batched) == _measured(one)
    assert [t.state for t in batched.trials] == [optuna.trial.TrialState.COMPLETE] * 5


def test_a_batch_stopped_before_its_trials_ran_queues_them_again(problem, tmp_path, monkeypatch):
    def stop(self, configs):
        raise KeyboardInterrupt

    monkeypatch.setattr(ConfigEvaluator, "race_together", stop)
    url = f"sqlite:///{tmp_path}/s.db"
    spec = StudySpec(problem=problem, trials=4, sampler="grid", confirm=False, storage=url, batch=2)
    with pytest.raises(KeyboardInterrupt):
        run_study(spec)
    study = optuna.load_study(study_name=store.study_names(store.open_storage(url, heartbeat=None))[0], storage=url)
    failed = [t for t in study.trials if t.state == optuna.trial.TrialState.FAIL]
    waiting = [t for t in study.trials if t.state == optuna.trial.TrialState.WAITING]
    assert len(failed) == 2 and all(t.user_attrs["fail_reason"] == INTERRUPTED for t in failed)
    assert sorted(str(t.system_attrs["fixed_params"]) for t in waiting) == sorted(str(t.params) for t in failed)

    monkeypatch.undo()
    study = run_study(spec)
    assert len(store.completed(study)) == 4
    assert not [t for t in study.trials if t.state in (optuna.trial.TrialState.RUNNING,
                                                        optuna.trial.TrialState.WAITING)]


def test_a_batch_must_be_a_positive_count(problem):
    for bad in (0, -1, True, 2.0):
        with pytest.raises(ConfigError, match="`batch` must be a positive integer"):
            StudySpec(problem=problem, batch=bad)


@pytest.mark.parametrize("sampler", ["structured", "tpe"])
def test_the_structured_sampler_and_tpe_propose_batches(problem, tmp_path, monkeypatch, sampler):
    # The structured sampler counts a running trial's configuration as taken: a batch of distinct ones. TPE may
    # repeat one: the repeat is answered from storage and uses no budget, as in a sequential study.
    raced: list[list[PopConfig]] = []
    race = ConfigEvaluator.race_together
    monkeypatch.setattr(ConfigEvaluator, "race_together", lambda self, configs: raced.append(list(configs))
                        or race(self, configs))
    study = run_study(StudySpec(problem=problem, trials=5, sampler=sampler, confirm=False, batch=3,
                                storage=f"sqlite:///{tmp_path}/s.db"))
    measured = [t for t in store.completed(study) if "reused_from" not in t.user_attrs]
    assert len(measured) == 5 and len({str(t.user_attrs["config"]) for t in measured}) == 5
    # (the structured sampler batches once its front holds a candidate: after the paper's rule, or later where
    # the timing puts the paper's rule off the front; its batch then takes the budget left, 2 or 3 trials)
    assert all(len(batch) >= 2 and len(set(map(str, batch))) == len(batch) for batch in raced)
    assert raced or sampler == "tpe"  # TPE's random start (seeded by the process) may repeat one: none to race
    assert not [t for t in study.trials if t.state == optuna.trial.TrialState.RUNNING]


def test_the_structured_sampler_batches_once_its_front_holds_a_candidate(problem, monkeypatch):
    # Its budget search is a bisection: until the front holds a candidate, each proposal waits for the answer
    # before it; other samplers batch from the start (once an item's cost beside the full model is measured).
    from types import SimpleNamespace

    from poptune.tune import study as study_module

    study = optuna.create_study(directions=["minimize", "maximize"])
    measured = SimpleNamespace(seconds_per_item=lambda: 0.5)
    front: list = []
    monkeypatch.setattr(study_module, "candidates", lambda *a: front)

    def size(sampler, evaluator=measured):
        spec = StudySpec(problem=problem, sampler=sampler, batch=4)
        return study_module._batch_size(study, spec, 8, evaluator, [], None)

    assert size("structured") == 1 and size("grid") == 4 and size("tpe") == 4
    assert size("grid", SimpleNamespace(seconds_per_item=lambda: None)) == 1
    front.append("a candidate")
    assert size("structured") == 4


def test_a_batched_trial_says_its_own_seconds(problem, tmp_path):
    # A batch's trials start when they are asked, together: each one's time is its own objective's and its share
    # of the batch's race, so their times add up to the batch's, not to a multiple of it (the progress line, the
    # ETA and the grid table read them).
    study = run_study(StudySpec(problem=problem, trials=5, sampler="grid", confirm=False, batch=3,
                                storage=f"sqlite:///{tmp_path}/s.db"))
    batched = [t for t in store.completed(study) if t.number >= 2]
    assert all("seconds" in t.user_attrs for t in batched)
    assert not any("seconds" in t.user_attrs for t in store.completed(study) if t.number < 2)  # asked alone
    span = max(t.datetime_complete for t in batched) - min(t.datetime_start for t in batched)
    own = [store.StoredTrial.of(t).seconds for t in batched]
    assert all(s > 0 for s in own) and sum(own) <= span.total_seconds() + 1.0
    assert "seconds" not in store.StoredTrial.of(batched[0]).info()  # an answer from storage times itself


def test_poptune_grid_batch_reaches_the_grid_study(problem, tmp_path, monkeypatch):
    """``poptune grid --batch K`` measures the grid K configurations at a time (the grid study's ``batch``)."""
    from poptune.cli import main
    from poptune.tune import study as study_module

    seen = []

    class Stop(Exception):
        pass

    def measured(spec, **kwargs):
        seen.append((spec.sampler, spec.batch))
        raise Stop

    monkeypatch.setattr(study_module, "run_study", measured)
    with pytest.raises(Stop):
        main(["grid", "--model", "tiny-llama", "--tasks", "passkey", "--limit", "2", "--lengths", "260",
              "--out", str(tmp_path), "--batch", "3"])
    assert seen == [("grid", 3)]
