"""Shared storages, on every backend: a trial is watched from its first moment, a restarted server is survived."""

from __future__ import annotations

import logging
import threading
import time

import optuna
import pytest

from poptune import store
from poptune.store.shared import SharedJournalStorage, SharedRDBStorage

optuna.logging.set_verbosity(optuna.logging.WARNING)
pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")


@pytest.fixture(params=["sqlite", "journal", "postgres"])
def url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/s.db"
    if request.param == "journal":
        return f"journal:{tmp_path}/s.journal"
    return request.getfixturevalue("postgres_url")


def test_storage_kinds(url):
    storage = store.open_storage(url, heartbeat=1)
    expected = SharedJournalStorage if url.startswith("journal:") else SharedRDBStorage
    assert isinstance(storage, expected) and storage.get_heartbeat_interval() == 1
    assert store.is_server(url) == (not url.startswith("sqlite"))


def test_a_trial_whose_worker_died_before_its_first_beat_is_failed_and_retried(url):
    storage = store.open_storage(url, heartbeat=1)
    study = optuna.create_study(storage=storage, study_name="s")
    trial = study.ask({"skip": optuna.distributions.IntDistribution(0, 5)})  # no heartbeat thread: a killed worker
    time.sleep(4.5)  # past the grace period of three 1 s beats (SQLite's clock has whole seconds)
    optuna.storages.fail_stale_trials(study)
    states = [t.state for t in study.get_trials()]
    assert states == [optuna.trial.TrialState.FAIL, optuna.trial.TrialState.WAITING]  # failed, and queued again
    assert study.trials[1].params == {"skip": trial.params["skip"]}


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_database_trial_that_never_beat_is_stale_after_the_grace_period(backend, tmp_path, request):
    # A worker killed after its trial became RUNNING but before any beat was written leaves no heartbeat row,
    # which Optuna's own check skips for ever.
    url = f"sqlite:///{tmp_path}/s.db" if backend == "sqlite" else request.getfixturevalue("postgres_url")
    storage = store.open_storage(url, heartbeat=1)
    study = optuna.create_study(storage=storage, study_name="s")
    study.enqueue_trial({"skip": 3})
    silent = optuna.load_study(study_name="s", storage=url)  # Optuna's plain storage: no beat at all
    trial = silent.ask()
    assert trial.number == 0
    optuna.storages.fail_stale_trials(study)
    assert [t.state for t in study.get_trials()] == [optuna.trial.TrialState.RUNNING]  # young: not stale yet
    time.sleep(4.5)  # past the grace period of three 1 s beats (SQLite's clock has whole seconds)
    optuna.storages.fail_stale_trials(study)
    trials = study.get_trials()
    assert [t.state for t in trials] == [optuna.trial.TrialState.FAIL, optuna.trial.TrialState.WAITING]
    assert trials[1].system_attrs["failed_trial"] == 0 and trials[1].system_attrs["fixed_params"] == {"skip": 3}


def test_a_live_trial_is_not_stale(url):
    storage = store.open_storage(url, heartbeat=1)
    study = optuna.create_study(storage=storage, study_name="s")
    trial = study.ask()
    for _ in range(4):
        time.sleep(1)
        storage.record_heartbeat(trial._trial_id)
    optuna.storages.fail_stale_trials(study)
    assert [t.state for t in study.get_trials()] == [optuna.trial.TrialState.RUNNING]


def test_calls_during_a_server_restart_are_retried(postgres, postgres_url, caplog):
    storage = store.open_storage(postgres_url, heartbeat=1)
    study = optuna.create_study(storage=storage, study_name="s")
    restart = threading.Thread(target=postgres.restart)
    with caplog.at_level(logging.WARNING, logger="poptune.store.shared"):
        restart.start()
        written = 0
        while restart.is_alive() or written < 5:
            study.set_user_attr(f"k{written}", written)  # would raise without the retries
            written += 1
        restart.join()
    assert study.user_attrs == {f"k{i}": i for i in range(written)}
    assert any("retrying" in r.getMessage() for r in caplog.records)


def test_an_unreachable_server_is_one_clear_error(postgres):
    from poptune.errors import ConfigError

    with pytest.raises(ConfigError, match=r"cannot open storage 'postgresql://nobody:\*\*\*@127.0.0.1:1/x'"):
        store.open_storage("postgresql://nobody:secret@127.0.0.1:1/x", retry_s=1.0)
