"""The Optuna study on a tiny model with tiny budgets: resume, reuse, crash recovery, bad input."""

from __future__ import annotations

import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import time

import optuna
import pytest

from poptune import ConfigError, PopConfig, store
from poptune.cli import main
from poptune.env import TuningProblem
from poptune.problem.space import paper_default
from poptune.tune.params import params_of
from poptune.tune.study import StudySpec, run_study

optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.fixture
def problem(eval_data):
    return TuningProblem(model="tiny-llama", max_drop=None, tasks=("piqa",), limit=4, data_dir=str(eval_data),
                         lengths=(16,), repeats=1, decode_tokens=0, precision=None)  # the stopping rule: test_timer


def _configs(study, *, reused=False):
    return [
        PopConfig.from_dict(t.user_attrs["config"])
        for t in store.completed(study)
        if reused or not {"reused_from", "remeasure_of"} & set(t.user_attrs)
    ]


def test_first_trials_are_full_model_and_paper_rule(problem, tmp_path):
    study = run_study(StudySpec(problem=problem, trials=2, storage=f"sqlite:///{tmp_path}/s.db"))
    assert _configs(study) == [PopConfig(skip=0), paper_default(6)]
    assert study.metric_names == ["prefill_ms@16", "accuracy"]
    first = store.completed(study)[0].user_attrs
    assert first["drop_points"] == 0.0 and first["accuracy"] == first["full_accuracy"]
    assert {"latency", "hardware", "versions", "speedup", "items"} <= set(first)
    assert study.user_attrs["num_layers"] == 6 and study.user_attrs["model"] == "tiny-llama"


def test_rerunning_resumes_and_measures_nothing_twice(problem, tmp_path):
    url = f"sqlite:///{tmp_path}/s.db"
    first = run_study(StudySpec(problem=problem, trials=3, sampler="random", storage=url, seed=1))
    before = {t.number: (t.values, t.user_attrs["config"]) for t in store.completed(first)}
    second = run_study(StudySpec(problem=problem, add=3, sampler="random", storage=url, seed=1))
    assert len(_configs(second)) == 6  # answers from storage and re-measures use no budget
    kept = {t.number: (t.values, t.user_attrs["config"]) for t in store.completed(second) if t.number in before}
    assert kept == before
    measured = _configs(second)
    assert len(measured) == len(set(measured))  # a configuration is measured once; repeats are answered


def test_a_measured_configuration_is_answered_from_storage(problem, tmp_path):
    config = PopConfig(skip=3, boundary="none")
    url = f"sqlite:///{tmp_path}/s.db"
    study = run_study(StudySpec(problem=problem, trials=3, storage=url, enqueue=(config,)))
    study.enqueue_trial(params_of(config, problem.kv))  # as a sampler re-suggesting a measured point would
    study = run_study(StudySpec(problem=problem, add=1, storage=url))
    trials = [t for t in store.completed(study)
              if t.user_attrs["config"] == config.to_dict() and "remeasure_of" not in t.user_attrs]
    assert len(trials) == 2
    original, again = trials
    assert again.user_attrs["reused_from"] == original.number
    assert again.values == original.values


def test_accuracy_budget_is_a_constraint(problem, tmp_path):
    spec = StudySpec(problem=TuningProblem(**{**problem.to_dict(), "max_drop": 0.0}), trials=3,
                     storage=f"sqlite:///{tmp_path}/s.db")
    study = run_study(spec)
    for trial in store.completed(study):  # the search only rejects: feasible until the lower end is beyond
        assert trial.user_attrs["feasible"] == (trial.user_attrs["drop"]["lo"] <= 0.0)
    assert all(t.user_attrs["feasible"] for t in study.best_trials)


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model", "no-such-model"], "unknown model"),
        (["--storage", "not a url"], "malformed storage URL"),
        (["--storage", "sqlite://"], "needs a file path"),
        (["--max-drop=-1"], "argument --max-drop: expected accuracy points >= 0"),
        (["--trials", "0"], "`trials` must be a positive integer"),
        (["--enqueue", "3/last"], "`--enqueue` takes SKIP/BOUNDARY/OFFSET items"),
        (["--enqueue", "3/middle/0"], "`boundary` must be one of"),
        (["--objectives", "ttft,speed"], "unknown objective(s) 'speed': use ttft, accuracy, tpot, kv_bytes"),
        (["--objectives", "ttft"], "a study needs two or more distinct objectives"),
        (["--objectives", "accuracy,kv_bytes"], "the structured sampler searches by TTFT and accuracy"),
    ],
)
def test_bad_input_is_one_line_exit_2(capsys, argv, message):
    try:
        code = main(["study", "--model", "tiny-llama", "--tasks", "embedded", *argv])
    except SystemExit as e:  # refused by the argument's parser
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1


def test_foreign_or_unreadable_database_is_refused_untouched(capsys, tmp_path):
    foreign = tmp_path / "other.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a database at all" * 10)
    for path, message in ((foreign, "not an Optuna one"), (garbage, "not an SQLite database"),
                          (tmp_path, "is a directory")):
        before = _sha(path) if path.is_file() else None
        code = main(["study", "--model", "tiny-llama", "--tasks", "embedded", "--storage", f"sqlite:///{path}"])
        err = capsys.readouterr().err
        assert code == 2 and message in err, err
        if before:
            assert _sha(path) == before


def test_a_study_with_other_settings_is_not_mixed(problem, tmp_path, capsys):
    url = f"sqlite:///{tmp_path}/s.db"
    run_study(StudySpec(problem=problem, trials=1, storage=url))
    before = _sha(tmp_path / "s.db")
    code = main(["study", "--model", "tiny-llama", "--tasks", "piqa", "--limit", "5", "--lengths", "16",
                 "--data-dir", problem.data_dir, "--storage", url, "--repeats", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "other settings (" in err and "limit" in err
    assert _sha(tmp_path / "s.db") == before


def _study_cmd(url, data_dir, trials):
    return [sys.executable, "-m", "poptune", "study", "--model", "tiny-llama", "--tasks", "piqa", "--limit", "4",
            "--lengths", "16", "--data-dir", data_dir, "--storage", url, "--sampler", "grid", "--seed", "3",
            "--repeats", "1", "--precision", "0", "--heartbeat", "1", "--trials", str(trials)]


def _running_with_heartbeat(db):
    """Numbers of RUNNING trials whose heartbeat thread has written (before that, a kill is not detectable)."""
    with sqlite3.connect(db) as conn:
        return conn.execute(
            "SELECT t.number FROM trials t JOIN trial_heartbeats h ON h.trial_id = t.trial_id WHERE t.state = 'RUNNING'"
        ).fetchall()


def test_killed_study_resumes_with_nothing_lost(problem, tmp_path):
    """SIGKILL mid-trial: the stale trial is failed and re-run, completed trials stay, same configurations."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    reference = tmp_path / "reference.db"
    subprocess.run(_study_cmd(f"sqlite:///{reference}", problem.data_dir, 3), env=env, check=True,
                   capture_output=True, timeout=600)

    db = tmp_path / "killed.db"
    proc = subprocess.Popen(_study_cmd(f"sqlite:///{db}", problem.data_dir, 3), env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        try:
            if db.exists() and (2,) in _running_with_heartbeat(db):  # the third trial is being measured
                break
        except sqlite3.OperationalError:  # tables not created yet
            pass
        time.sleep(0.1)
    assert proc.poll() is None, "the study ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    url = f"sqlite:///{db}"
    killed = optuna.load_study(study_name=store.study_names(store.open_storage(url, heartbeat=None))[0], storage=url)
    kept = {t.number: t.values for t in store.completed(killed)}
    assert len(kept) == 2

    time.sleep(3.5)  # past the grace period of three 1 s heartbeats
    subprocess.run(_study_cmd(url, problem.data_dir, 3), env=env, check=True, capture_output=True, timeout=600)
    resumed = optuna.load_study(study_name=killed.study_name, storage=url)
    states = {t.number: t.state for t in resumed.trials}
    assert states[2] == optuna.trial.TrialState.FAIL
    assert {t.number: t.values for t in store.completed(resumed)[:2]} == kept
    ref = optuna.load_study(study_name=killed.study_name, storage=f"sqlite:///{reference}")
    assert sorted(map(str, _configs(resumed))) == sorted(map(str, _configs(ref)))
    assert {(r.skip, r.boundary, r.offset) for r in store.front(resumed)} <= {
        (c.skip, c.boundary, c.offset) for c in _configs(ref)
    }


def test_a_trial_that_never_beat_is_retried_and_the_budget_completes(problem, tmp_path):
    """A worker killed after taking a trial but before its first heartbeat: failed after the grace period, retried."""
    url = f"sqlite:///{tmp_path}/s.db"
    study = run_study(StudySpec(problem=problem, trials=1, storage=url, heartbeat_s=1))  # full model; paper rule queued
    ghost = optuna.load_study(study_name=study.study_name, storage=url).ask()  # Optuna's plain storage: never beats
    assert ghost.number == 1 and study.trials[1].state == optuna.trial.TrialState.RUNNING
    time.sleep(4.5)  # past the grace period of three 1 s beats (SQLite's clock has whole seconds)
    # The timeout only keeps a regression from hanging the suite (the ghost would hold its place for ever): long
    # enough that no load ends the study before its 3 trials (the test took 76 s at a load of 6 on 2 cores).
    study = run_study(StudySpec(problem=problem, trials=3, storage=url, heartbeat_s=1, timeout=600))
    trials = study.get_trials()
    assert len(store.completed(study)) == 3  # without the fix the ghost holds a place in the budget for ever
    assert trials[1].state == optuna.trial.TrialState.FAIL
    (retry,) = [t for t in trials if t.system_attrs.get("failed_trial") == 1]
    assert retry.state == optuna.trial.TrialState.COMPLETE and retry.user_attrs["config"] == paper_default(6).to_dict()
    assert not [t for t in trials if t.state == optuna.trial.TrialState.RUNNING]


def test_importance_proposal_is_enqueued(problem, tmp_path, capsys):
    from poptune.baselines.importance import ImportanceResult, ImportanceSpec

    # Prefill importance lowest in layers 2-3: a ratio of 1/3 (2 of 6 layers) with offset 2 skips exactly those.
    result = ImportanceResult(model="tiny-llama", prefill=(9.0, 8.0, 0.1, 0.2, 5.0, 6.0), decode=(1.0,) * 6,
                              spec=ImportanceSpec(samples=1), source="test", loss=0.0, seconds=0.0, dtype="float32",
                              device="cpu")
    path = tmp_path / "importance.json"
    path.write_text(result.to_json())
    url = f"sqlite:///{tmp_path}/s.db"
    code = main(["study", "--model", "tiny-llama", "--tasks", "piqa", "--limit", "4", "--lengths", "16",
                 "--data-dir", problem.data_dir, "--storage", url, "--repeats", "1", "--precision", "0",
                 "--trials", "3", "--init-from-importance", str(path)])
    assert code == 0
    study = store.load_study(store.open_storage(url, heartbeat=None), None)
    assert PopConfig(skip=2, boundary="last", offset=2) in _configs(study)
    other = tmp_path / "other.json"
    other.write_text(result.to_json().replace('"tiny-llama"', '"tiny-qwen3"'))
    code = main(["study", "--model", "tiny-llama", "--tasks", "piqa", "--data-dir", problem.data_dir,
                 "--storage", url, "--init-from-importance", str(other)])
    assert code == 2 and "analyses 'tiny-qwen3'" in capsys.readouterr().err


def test_an_image_study_tunes_for_its_image_prompt(tmp_path):
    """`--image` makes the timed prompt one image and a question; the study stores it and its token count."""
    from poptune.models.vision import ImageSize

    problem = TuningProblem(model="tiny-qwen3-vl", max_drop=None, tasks=("passkey",), limit=2, lengths=(16,), repeats=1,
                            decode_tokens=0, image="64x48")
    study = run_study(StudySpec(problem=problem, trials=2, storage=f"sqlite:///{tmp_path}/s.db"))
    assert study.user_attrs["problem"]["image"] == "64x48"
    assert study.user_attrs["target_length"] == 125  # bos, 70 image tokens between start/end, 52-byte question
    assert study.metric_names == ["prefill_ms@image-64x48", "accuracy"]
    for trial in store.completed(study):
        assert trial.user_attrs["target_length"] == 125
        assert trial.user_attrs["latency"]["125"]["image_tokens"] == 70
    with pytest.raises(ConfigError, match="WIDTHxHEIGHT"):
        TuningProblem(model="tiny-qwen3-vl", image="64by48")
    assert str(ImageSize.parse(problem.image)) == "64x48"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model", "tiny-qwen3-vl", "--image", "64x48,128x96"], "takes one WIDTHxHEIGHT"),
        (["--model", "tiny-qwen3-vl", "--image", "64"], "WIDTHxHEIGHT in pixels"),
        (["--model", "tiny-llama", "--image", "640x480"], "'tiny-llama' is a text-only model"),
        (["--model", "tiny-qwen3-vl", "--image", "64x48", "--lengths", "16"], "not both"),
    ],
)
def test_image_study_input_errors_are_one_line_exit_2(capsys, tmp_path, argv, message):
    url = f"sqlite:///{tmp_path}/s.db"
    assert main(["study", *argv, "--storage", url, "--tasks", "passkey"]) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and message in err and out == ""
    assert not (tmp_path / "s.db").exists()


def _failing_evaluate(monkeypatch, bad, make_error):
    """Make measuring ``bad`` fail with ``make_error(measurement)``; returns the list of configurations measured."""
    from poptune.problem.evaluator import ConfigEvaluator

    measured, original = [], ConfigEvaluator.evaluate

    def evaluate(self, config):
        measured.append(config)
        result = original(self, config)
        if config == bad:
            make_error(result)
        return result

    monkeypatch.setattr(ConfigEvaluator, "evaluate", evaluate)
    return measured


def test_out_of_memory_fails_one_trial_and_is_not_measured_again(problem, tmp_path, monkeypatch):
    import torch

    bad = paper_default(6)

    def oom(_):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    measured = _failing_evaluate(monkeypatch, bad, oom)
    url = f"sqlite:///{tmp_path}/s.db"
    study = run_study(StudySpec(problem=problem, trials=3, storage=url))
    failed = [t for t in study.trials if t.state == optuna.trial.TrialState.FAIL]
    assert len(store.completed(study)) == 3  # the study went on past the failure
    assert len(failed) == 1 and failed[0].user_attrs["config"] == bad.to_dict()
    assert failed[0].user_attrs["fail_reason"].startswith("OutOfMemoryError: CUDA out of memory")
    study.enqueue_trial(params_of(bad, problem.kv))  # suggested again
    study = run_study(StudySpec(problem=problem, add=1, storage=url))
    again = [t for t in study.trials if t.state == optuna.trial.TrialState.FAIL][-1]
    assert again.user_attrs["fail_reason"].startswith(f"failed before in trial {failed[0].number}: OutOfMemoryError")
    assert measured.count(bad) == 1


def test_a_non_finite_measurement_fails_and_is_never_a_result(problem, tmp_path, monkeypatch):
    import dataclasses

    bad = paper_default(6)

    def nan(result):
        latency = {n: {**row, "pop_ms": float("nan")} for n, row in result.latency.items()}
        dataclasses.replace(result, latency=latency)  # what a NaN timing would build: refused

    _failing_evaluate(monkeypatch, bad, nan)
    study = run_study(StudySpec(problem=problem, trials=2, storage=f"sqlite:///{tmp_path}/s.db"))
    (failed,) = [t for t in study.trials if t.state == optuna.trial.TrialState.FAIL]
    assert "not finite" in failed.user_attrs["fail_reason"] and failed.values is None
    assert all(t.user_attrs["config"] != bad.to_dict() for t in store.completed(study))
    assert len(store.completed(study)) == 2


def _no_space(*args, **kwargs):
    import errno

    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_is_one_line_and_leaves_the_database_intact(problem, tmp_path, monkeypatch, capsys):
    import matplotlib.figure

    db = tmp_path / "s.db"
    args = ["--model", "tiny-llama", "--tasks", "piqa", "--limit", "4", "--lengths", "16", "--data-dir",
            problem.data_dir, "--storage", f"sqlite:///{db}", "--repeats", "1", "--precision", "0"]
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", _no_space)
    code = main(["study", *args, "--trials", "2"])
    err = capsys.readouterr().err  # progress bars, then the one error line
    assert code == 2 and err.count("error:") == 1, err
    assert err.splitlines()[-1].startswith("poptune study: error: cannot write")
    assert err.endswith("No space left on device\n")
    assert not list(tmp_path.glob("*.png"))  # no half-written plot either
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    before = _sha(db)
    monkeypatch.setattr("pathlib.Path.write_text", _no_space)
    code = main(["export", "--storage", f"sqlite:///{db}", "--max-drop", "100", "--out", str(tmp_path / "pop.json")])
    err = capsys.readouterr().err
    assert code == 2 and "No space left on device" in err and err.count("\n") == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full-answers.sqlite", "s.db"] and _sha(db) == before
    study = store.load_study(store.open_storage(f"sqlite:///{db}", heartbeat=None), None)
    assert len(store.completed(study)) == 2


def test_a_study_reports_its_phases_and_work_to_a_listener(problem, tmp_path):
    """The full model's reference, each trial's latency pairs and accuracy rounds, the checks: phases with counts."""
    from poptune import progress

    class Record:
        def __init__(self):
            self.stack, self.seen, self.done = [], [], {}

        def start(self, label, unit, total):
            self.stack.append(label)
            self.seen.append(" > ".join(self.stack))

        def expect(self, count):
            pass

        def advance(self, count):
            key = " > ".join(self.stack)
            self.done[key] = self.done.get(key, 0) + count

        def end(self):
            self.stack.pop()

    record = Record()
    with progress.listening(record):
        run_study(StudySpec(problem=problem, trials=2, storage=f"sqlite:///{tmp_path}/s.db"))
    seen = record.seen
    assert "state reuse check" in seen and any(s.startswith("full model accuracy") for s in seen)
    paper = "trial 1 (2/last/0)"
    assert f"{paper} > latency" in seen and f"{paper} > accuracy > round 1: 4 items per task" in seen
    assert record.done[f"{paper} > latency"] >= 1  # timing pairs
    assert record.done[f"{paper} > accuracy > round 1: 4 items per task"] >= 4  # scored requests
    assert {"A/A check at start", "A/A check at end"} <= set(seen) and record.stack == []


def test_a_trial_failed_as_stale_under_its_running_worker_is_retried_and_the_worker_goes_on(problem, tmp_path,
                                                                                           monkeypatch):
    """Another worker that finds a trial's heartbeats lapsed (a loaded machine) fails it and enqueues its retry while
    this worker still measures it: Optuna then refuses to tell the trial; the worker must go on, not die."""
    from poptune.tune import study as study_module

    real, failed = study_module.make_objective, []

    def make(study, *args, **kwargs):
        objective = real(study, *args, **kwargs)

        def run(trial):
            values = objective(trial)
            if not failed:  # what optuna.storages.fail_stale_trials does from the other worker
                storage = study._storage
                storage.set_trial_state_values(trial._trial_id, optuna.trial.TrialState.FAIL)
                storage.get_heartbeat_stale_trial_callback()(study, storage.get_trial(trial._trial_id))
                failed.append(trial.number)
            return values
        return run

    monkeypatch.setattr(study_module, "make_objective", make)
    study = run_study(StudySpec(problem=problem, trials=2, storage=f"sqlite:///{tmp_path}/s.db"))
    assert failed == [0]
    assert set(_configs(study)) == {PopConfig(skip=0), paper_default(6)}  # the failed trial's retry measured it again
    retried = [t for t in study.get_trials(deepcopy=False) if "failed_trial" in t.system_attrs]
    assert [t.system_attrs["failed_trial"] for t in retried] == [0]
