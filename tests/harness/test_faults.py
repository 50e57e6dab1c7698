"""Faults on real processes (tiny model, SQLite): signals, kill -9, two workers, a full disk. Marked ``slow``.

The process helpers are those of :mod:`tests.harness.faults`, which prints the same cases as a table
(``python -m tests.harness.faults``).
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from . import faults

pytestmark = pytest.mark.slow


def _stop_limit() -> float:
    """Seconds a study may take to stop after a signal: 2 on an idle machine (what docs/reliability.md promises),
    stretched by how many runnable processes share each core now (its teardown is CPU work: a loaded machine's
    is slower), never above 10 s, still well short of the trial it interrupts."""
    return 2.0 * min(5.0, max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1)))


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_mid_trial_stops_within_2s_and_the_same_command_resumes(tmp_path, signum, code):
    db = tmp_path / "s.db"
    argv = [*faults.STUDY, "--trials", "2", "--storage", f"sqlite:///{db}"]
    proc = faults.start(argv, tmp_path)
    faults.wait_mid_trial(proc, db)
    before = faults.completed_values(db)
    sent = time.monotonic()
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - sent < _stop_limit(), "it waited for the measurement rather than stopping at once"
    assert proc.returncode == code
    lines = faults._lines(err).splitlines()
    assert lines == [f"interrupted: {len(before)} trials stored in sqlite:///{db}; run the same command to resume"]
    assert "RUNNING" not in [s for _, s in faults.states(db)]  # failed at once, not left for the heartbeat
    assert faults.run(argv, tmp_path)[0] == 0
    after = faults.completed_values(db)
    assert all(after[n] == v for n, v in before.items())
    configs = faults.measured_configs(db)
    assert len(configs) == len(set(configs)) >= 2  # resumed to the study's total, each configuration once


def test_kill_9_mid_trial_loses_only_that_trial(tmp_path):
    db = tmp_path / "s.db"
    argv = [*faults.STUDY, "--trials", "2", "--storage", f"sqlite:///{db}"]
    proc = faults.start(argv, tmp_path)
    faults.wait_mid_trial(proc, db)
    before = faults.completed_values(db)
    proc.kill()
    proc.communicate()
    time.sleep(6.5)  # past three 2 s heartbeats
    assert faults.run(argv, tmp_path)[0] == 0  # the lock went with the killed process
    after = faults.completed_values(db)
    assert all(after[n] == v for n, v in before.items()) and len(faults.measured_configs(db)) >= 2
    assert "RUNNING" not in [s for _, s in faults.states(db)]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGKILL])
def test_the_full_models_trial_stopped_is_measured_on_resume(tmp_path, signum):
    """Issue 87: Ctrl-C lost the full model's trial for good; after kill -9 the resume waited for it for ever."""
    row = faults.full_model_fault(tmp_path, signum)
    assert row["line"].startswith("resume: exit 0"), row
    assert row["lost"].startswith("the full model measured 1 time(s)") and row["lost"].endswith(", 0 twice"), row


def test_a_second_process_on_one_sqlite_study_is_refused(tmp_path):
    db = tmp_path / "s.db"
    argv = [*faults.STUDY, "--trials", "3", "--storage", f"sqlite:///{db}"]
    first = faults.start(argv, tmp_path)
    faults.wait_mid_trial(first, db, complete=0)
    # Stopped, the first keeps its lock (a flock goes only with the process) and cannot finish its few seconds of work
    # before the second has started: without this the two raced (the first, done, let the second resume the study).
    first.send_signal(signal.SIGSTOP)
    try:
        code, err = faults.run(argv, tmp_path)
    finally:
        first.send_signal(signal.SIGCONT)
    assert code == 2 and len(err.splitlines()) == 1
    assert "another process is running a study" in err and "journal:PATH" in err and "postgresql://" in err
    first.communicate(timeout=900)
    assert first.returncode == 0
    configs = faults.measured_configs(db)
    assert len(configs) == len(set(configs)) == 3


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
def test_a_full_disk_is_one_line_at_once_and_keeps_the_study(tmp_path):
    row = faults.full_disk_fault(tmp_path)
    assert row["exit"] == 2 and "database or disk is full" in row["line"] and row["seconds"] < 60
    assert "all kept" in row["lost"]
    assert not any(os.path.ismount(p) for p in tmp_path.iterdir())
