"""SIGINT and SIGTERM: the running trial is failed at once as interrupted and queued again."""

from __future__ import annotations

import os
import signal
import time

import optuna
import pytest
from optuna.trial import TrialState

from poptune.tune.interrupt import INTERRUPTED, Interrupted, exit_code, interruptible, marking_interrupted

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _objective(signum: int):
    def objective(trial: optuna.Trial) -> float:
        trial.suggest_int("skip", 0, 5)
        trial.suggest_categorical("boundary", ["none", "last"])
        trial.suggest_int("offset", 0, 2)
        os.kill(os.getpid(), signum)
        time.sleep(30)  # a long measurement: the signal must not wait for it
        return 1.0

    return objective


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_fails_the_running_trial_at_once(tmp_path, capfd, signum, code):
    study = optuna.create_study(storage=f"sqlite:///{tmp_path}/s.db")
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    started = time.monotonic()
    with pytest.raises(Interrupted) as exc:
        with interruptible():
            study.optimize(marking_interrupted(study, _objective(signum)), n_trials=1)
    assert time.monotonic() - started < 2.0
    assert exit_code(exc.value) == code
    failed, queued = study.trials
    assert failed.state == TrialState.FAIL and failed.user_attrs["fail_reason"] == INTERRUPTED
    assert queued.state == TrialState.WAITING and queued.system_attrs["fixed_params"] == failed.params
    assert {s: signal.getsignal(s) for s in before} == before  # handlers given back
    assert "Traceback" not in capfd.readouterr().err  # Optuna's logged traceback is not printed
