"""Storages refuse what is not theirs, readers create nothing, SQLite errors are classified, one SQLite worker."""

from __future__ import annotations

import fcntl
import os
import sqlite3
import time

import optuna
import pytest
import sqlalchemy.exc

from poptune import ConfigError, store
from poptune.errors import StorageError
from poptune.store.shared import SharedRDBStorage, is_permanent_sqlite, is_transient


def test_a_journal_on_a_file_that_is_not_one_is_refused_untouched(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    with pytest.raises(ConfigError, match="not an Optuna journal file"):
        store.open_storage(f"journal:{notes}")
    with pytest.raises(ConfigError, match="not an Optuna journal file"):
        store.check_storage(f"journal:{notes}")
    assert notes.read_text() == "my notes\n"
    db = tmp_path / "s.db"
    store.open_storage(f"sqlite:///{db}", heartbeat=None)
    before = db.read_bytes()
    with pytest.raises(ConfigError, match="is an SQLite database, not a journal file"):
        store.open_storage(f"journal:{db}")
    assert db.read_bytes() == before


def test_a_real_journal_opens_again(tmp_path):
    url = f"journal:{tmp_path}/j.log"
    optuna.create_study(storage=store.open_storage(url, heartbeat=None), study_name="s")
    assert store.study_names(store.open_storage(url, heartbeat=None)) == ["s"]
    assert store.study_names(store.open_reader(url)) == ["s"]


@pytest.mark.parametrize("url", ["sqlite:///{d}/missing.db", "journal:{d}/missing.log"])
def test_readers_never_create_a_database(tmp_path, url):
    with pytest.raises(ConfigError, match="no study database at .*poptune study"):
        store.open_reader(url.format(d=tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_check_storage_creates_nothing(tmp_path):
    store.check_storage(f"sqlite:///{tmp_path}/new.db")
    store.check_storage(f"journal:{tmp_path}/new.log")
    assert list(tmp_path.iterdir()) == []


def _sqlite_error(path, write_sql: str, **connect) -> sqlite3.Error:
    conn = sqlite3.connect(path, **connect)
    try:
        conn.execute(write_sql)
        conn.commit()
    except sqlite3.Error as e:
        return e
    finally:
        conn.close()
    raise AssertionError("no error")


def _wrapped(error: sqlite3.Error) -> sqlalchemy.exc.OperationalError:
    return sqlalchemy.exc.OperationalError("INSERT ...", {}, error)


def test_busy_is_transient_read_only_and_corrupt_are_not(tmp_path):
    db = tmp_path / "s.db"
    sqlite3.connect(db).execute("CREATE TABLE t (x)").connection.commit()
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    busy = _sqlite_error(db, "INSERT INTO t VALUES (1)", timeout=0)
    holder.execute("ROLLBACK")
    holder.close()
    read_only = _sqlite_error(f"file:{db}?mode=ro", "INSERT INTO t VALUES (1)", uri=True)
    corrupt_file = tmp_path / "corrupt.db"
    corrupt_file.write_bytes(b"SQLite format 3\x00" + b"\x07" * 4096)
    corrupt = _sqlite_error(corrupt_file, "SELECT * FROM sqlite_master")
    full = sqlite3.OperationalError("database or disk is full")
    full.sqlite_errorname = "SQLITE_FULL"
    assert is_transient(_wrapped(busy)) and not is_permanent_sqlite(_wrapped(busy))
    for error in (read_only, corrupt, full):
        assert is_permanent_sqlite(_wrapped(error)) and not is_transient(_wrapped(error)), error
    lost = sqlalchemy.exc.OperationalError("SELECT 1", {}, ConnectionRefusedError("server restarting"))
    assert is_transient(lost)  # a database server going away is still retried


def test_a_read_only_database_fails_at_once_in_one_line(tmp_path):
    db = tmp_path / "s.db"
    store.open_storage(f"sqlite:///{db}", heartbeat=None)
    storage = SharedRDBStorage(f"sqlite:///file:{db}?mode=ro&uri=true", retry_s=60.0)
    started = time.monotonic()
    with pytest.raises(StorageError) as exc:
        storage.create_new_study([optuna.study.StudyDirection.MINIMIZE], "s")
    assert time.monotonic() - started < 30.0  # not retried for its 60 s (a bound any loaded machine meets)
    assert "\n" not in str(exc.value) and "readonly" in str(exc.value)


def test_a_second_live_sqlite_worker_is_refused(tmp_path):
    url = f"sqlite:///{tmp_path}/s.db"
    store.open_storage(url, heartbeat=None)
    fd = os.open(tmp_path / "s.db", os.O_RDONLY)  # another process's lock, as far as flock is concerned
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        with pytest.raises(ConfigError, match="another process is running a study.*journal:PATH.*postgresql"):
            with store.sole_sqlite_worker(url):
                pass
    finally:
        os.close(fd)
    with store.sole_sqlite_worker(url):  # free again: taken, and given back on leaving
        with pytest.raises(ConfigError, match="another process"):
            with store.sole_sqlite_worker(url):
                pass
    with store.sole_sqlite_worker(url):
        pass
    with store.sole_sqlite_worker(f"journal:{tmp_path}/j.log"):  # journals and servers share by design
        pass
