"""Storages under hostile paths (issue 49): a journal or SQLite path must be a regular file or absent; a stale lock
of a relative journal is released after its grace; a full disk under a journal is one StorageError.

Every call that could hang on today's code (a FIFO read, a lock that never resolves) runs in a thread joined
with a time-out, so a regression fails the test instead of hanging it.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
from pathlib import Path

import optuna
import pytest

from poptune import store
from poptune.errors import ConfigError, StorageError
from tests.hostile import assert_intact, hostile_paths

optuna.logging.set_verbosity(optuna.logging.WARNING)
pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")

ROOT = Path(__file__).resolve().parents[2]


def _within(seconds: float, call, *args, **kwargs):
    """``call(*args, **kwargs)`` in a thread: its exception (or None); a call still running after ``seconds``
    fails the test (a hang is the bug)."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call(*args, **kwargs)
            outcome.append(None)
        except BaseException as e:  # noqa: BLE001  (handed back to the test)
            outcome.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert outcome, f"{getattr(call, '__name__', call)} still running after {seconds} s"
    return outcome[0]


@pytest.mark.parametrize("kind", ["fifo", "null", "full", "dangling"])
@pytest.mark.parametrize("scheme", ["journal:", "sqlite:///"])
@pytest.mark.parametrize("opener", [store.check_storage, store.open_storage, store.open_reader])
def test_a_storage_that_is_not_a_regular_file_is_refused_at_once(tmp_path, kind, scheme, opener):
    paths = hostile_paths(tmp_path / "hostile")
    error = _within(20, opener, f"{scheme}{paths[kind]}")
    assert isinstance(error, ConfigError), error
    assert "regular file" in str(error) or "missing file" in str(error) or "no study database" in str(error)
    assert_intact(paths)
    assert sorted(p.name for p in (tmp_path / "hostile").iterdir()) == sorted(p.name for p in paths.values())


def test_a_new_journal_lock_links_to_the_absolute_journal(tmp_path, monkeypatch):
    from poptune.store.shared import SafeJournalFileBackend

    monkeypatch.chdir(tmp_path)
    (tmp_path / "studies").mkdir()
    backend = SafeJournalFileBackend("studies/s.journal")
    with backend.locked():
        target = os.readlink(tmp_path / "studies" / "s.journal.lock")
        assert os.path.isabs(target) and os.path.exists(tmp_path / "studies" / "s.journal.lock")
    assert not os.path.lexists(tmp_path / "studies" / "s.journal.lock")


def test_a_stale_lock_that_does_not_resolve_is_released_after_its_grace(tmp_path):
    from poptune.store.shared import AbsoluteSymlinkLock

    journal = tmp_path / "studies" / "s.journal"
    journal.parent.mkdir()
    journal.touch()
    os.symlink("studies/s.journal", f"{journal}.lock")  # what a relative journal path left before (dangling)
    lock = AbsoluteSymlinkLock(str(journal), grace_period=1)
    assert _within(20, lock.acquire) is None
    assert os.readlink(f"{journal}.lock") == str(journal)
    lock.release()


def test_a_relative_journal_with_a_stale_lock_opens_after_the_grace(tmp_path):
    """The real case: `journal:studies/s.journal` (the docs' example) and the lock a killed writer left."""
    (tmp_path / "studies").mkdir()
    optuna.create_study(storage=store.open_storage(f"journal:{tmp_path}/studies/s.journal", heartbeat=None),
                        study_name="s")
    os.symlink("studies/s.journal", tmp_path / "studies" / "s.journal.lock")  # relative: never resolves
    code = ("from poptune import store; import optuna; "
            "s = store.open_storage('journal:studies/s.journal'); print(store.study_names(s))")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr
    assert "['s']" in done.stdout


def _journal_study(tmp_path):
    url = f"journal:{tmp_path}/s.journal"
    study = optuna.create_study(storage=store.open_storage(url, heartbeat=None), study_name="s")
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    return url, study


def _full_disk_after(monkeypatch, written: int) -> None:
    """Every append writes ``written`` bytes, then the disk is full."""
    import poptune.store.shared as shared

    real = os.write

    def write(fd, data):
        if written:
            real(fd, bytes(data[:written]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(shared.os, "write", write)


@pytest.mark.parametrize("written", [0, 7])
def test_a_full_disk_under_a_journal_is_one_storage_error_and_loses_nothing(tmp_path, monkeypatch, written):
    url, study = _journal_study(tmp_path)
    size = os.path.getsize(tmp_path / "s.journal")
    _full_disk_after(monkeypatch, written)
    with pytest.raises(StorageError, match=r"^storage journal:.*s\.journal failed: No space left on device "
                                           r"\(ENOSPC\); nothing is retried") as failed:
        study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    assert len(str(failed.value).splitlines()) == 1
    monkeypatch.undo()
    assert os.path.getsize(tmp_path / "s.journal") == size  # the half-written record was cut off again
    again = optuna.load_study(study_name="s", storage=store.open_reader(url))
    assert [t.state.name for t in again.trials] == ["COMPLETE", "COMPLETE"]


def test_a_heartbeat_thread_on_a_full_disk_prints_no_traceback(tmp_path, monkeypatch):
    url, _ = _journal_study(tmp_path)
    storage = store.open_storage(url, heartbeat=30)
    study = optuna.load_study(study_name="s", storage=storage)
    trial = study.ask()
    _full_disk_after(monkeypatch, 0)
    seen: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda info: seen.append(info.exc_value))
    beat = threading.Thread(target=storage.record_heartbeat, args=(trial._trial_id,))
    beat.start()
    beat.join(20)
    assert not seen
    with pytest.raises(StorageError):  # the main thread's own write says it, in one line
        storage.record_heartbeat(trial._trial_id)
