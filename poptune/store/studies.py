"""The one place that opens Optuna storages and loads studies (see :mod:`poptune.store.urls` for the URLs).

The tuner writes through :func:`open_storage` (PostgreSQL works unchanged through Optuna's RDB storage); the
replay environment, export and leaderboards only read, through :func:`open_reader`.

Several workers share a study through the storage (PostgreSQL across machines, a journal file on one host);
:mod:`poptune.store.shared` adds what they need beyond Optuna's own storages: retries across a database restart,
heartbeats from a trial's first moment, heartbeats for the journal file.

A database is never modified unless it already is an Optuna database (or does not exist yet): pointing poptune
at any other file (a journal path at a text file too) is refused before anything is written. Readers
(:func:`open_reader`) never create a database, nor change a journal; a writer first cuts a journal's partial last
record (:mod:`poptune.store.journal`). :func:`read_study` refuses a study poptune did not write. An SQLite file
serves one worker process at a time (:func:`sole_sqlite_worker`); a second one is refused in one line naming the
storages that share safely.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from poptune.errors import ConfigError, PoptuneError
from poptune.files import check_regular
from poptune.store.attributes import PROBLEM_ATTR, StoredStudy
from poptune.store.journal import check_journal_file
from poptune.store.trials import check_trials
from poptune.store.urls import DEFAULT_STORAGE, URL_FORMS, check_url, file_of, public_url

if TYPE_CHECKING:
    import optuna

__all__ = [
    "HEARTBEAT_S", "MAX_RETRY", "RETRY_S", "check_sqlite_file", "check_storage", "load_study", "open_reader",
    "open_storage", "read_study", "sole_sqlite_worker", "study_names",
]

# Heartbeats let a resumed study fail the trials a killed process left RUNNING, then retry them (a few times:
# a configuration that kills its worker every time is not retried forever).
HEARTBEAT_S = 30
MAX_RETRY = 2

#: Seconds a server-backed storage call is retried (with backoff) before the error reaches the worker.
RETRY_S = 120.0

#: Seconds an SQLite call waits on a database another process has locked (SQLite's busy timeout), and then
#: retries; any other SQLite error (full disk, read-only, corrupt) is one line at once.
SQLITE_BUSY_S = 20

#: Seconds a server that refuses connections is retried when a storage is opened (a restart, not a typo).
OPEN_RETRY_S = 15.0


#: The tables of an Optuna SQLite database (any of them may hold more).
OPTUNA_TABLES = frozenset({"studies", "trials", "version_info"})


def _check_sqlite_file(path: Path, tables_of: frozenset[str] = OPTUNA_TABLES, kind: str = "an Optuna one") -> None:
    """Refuse a file that exists and is not an SQLite database holding ``tables_of`` (``kind``) or no table at all:
    an Optuna database by default (before Optuna creates tables in it)."""
    if path.is_dir():
        raise ConfigError(f"{path} is a directory, not a database file")
    check_regular(path, "database file")  # SQLite would write through a link to a device, and beside it
    if not path.exists():
        if not path.parent.exists():
            raise ConfigError(f"the folder of {path} does not exist")
        return
    if path.stat().st_size == 0:
        return
    try:
        with open(path, "rb") as f:
            header = f.read(16)
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror or e}") from e
    if header != b"SQLite format 3\x00":
        raise ConfigError(f"{path} is not an SQLite database")
    try:
        # as long as every other SQLite call waits on a locked file (sqlite3's own default is 5 s)
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=SQLITE_BUSY_S)
        try:
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        finally:
            conn.close()
    except sqlite3.Error as e:
        raise ConfigError(f"cannot read {path} as SQLite: {e}") from e
    if tables and not tables_of <= tables:
        raise ConfigError(f"{path} is an SQLite database but not {kind} (tables: {', '.join(sorted(tables))})")


def check_sqlite_file(path: str | Path, tables: frozenset[str], kind: str) -> None:
    """Refuse ``path`` unless it is absent, empty, or an SQLite database holding ``tables`` (or none yet), a
    regular file or a link to one: a folder, a FIFO, a device, a link to nothing, text or another database is
    one line naming ``kind`` (e.g. "poptune's full-model answers"), before anything opens it for writing."""
    _check_sqlite_file(Path(path), tables, kind)


def open_storage(
    url: str | None = None, *, heartbeat: int | None = HEARTBEAT_S, retry_s: float = RETRY_S, writer: bool = True
) -> "optuna.storages.BaseStorage":
    """Open ``url`` (default :data:`DEFAULT_STORAGE`) as an Optuna storage several workers may share.

    Args:
        url: ``sqlite:///PATH``, another SQLAlchemy URL, or ``journal:PATH``.
        heartbeat: Seconds between trial heartbeats (None: none, for readers). A trial silent for three
            heartbeats is failed, and retried up to :data:`MAX_RETRY` times, by the next worker that starts a
            trial.
        retry_s: Seconds a database call is retried while the server is unreachable (see
            :mod:`poptune.store.shared`). A host name that does not resolve is not retried.
        writer: This process will write: a journal's partial last record is cut now, in one warning (a journal
            never gets an append onto one, whoever opened it; a reader that never writes leaves the file as it is).

    Raises:
        ConfigError: a malformed URL or one of another kind (MySQL, Redis, ...), an unreadable file or one that
            is not an Optuna database, a server that cannot be reached, a missing database driver.
    """
    import optuna

    url = check_url(url)
    beat: dict[str, Any] = {}
    retry = None
    if heartbeat:
        from optuna.storages import RetryHeartbeatStaleTrialCallback

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            retry = RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRY)
        beat = {"heartbeat_interval": heartbeat, "grace_period": 3 * heartbeat}
    if url.startswith("journal:"):
        return _open_journal(url, beat, retry, writer=writer)
    from sqlalchemy.engine import make_url

    parsed = make_url(url)  # check_url parsed it
    engine_kwargs: dict[str, Any] = {}
    if parsed.get_backend_name() == "sqlite":
        if not parsed.database:
            raise ConfigError(f"an SQLite storage URL needs a file path, got {url!r}")
        path = Path(parsed.database)
        if url == DEFAULT_STORAGE:
            path.parent.mkdir(parents=True, exist_ok=True)
        _check_sqlite_file(path)
        engine_kwargs = {"connect_args": {"timeout": SQLITE_BUSY_S}}
        retry_s = min(retry_s, SQLITE_BUSY_S)  # only a busy (locked) database is retried, and briefly
    from sqlalchemy.exc import IntegrityError, ProgrammingError

    from poptune.store.shared import SharedRDBStorage

    if retry is not None:
        beat["heartbeat_stale_trial_callback"] = retry
    from poptune.store.shared import is_transient, is_unresolved_host

    started, races = time.monotonic(), 0
    try:
        while True:
            try:
                with warnings.catch_warnings():  # heartbeats are "experimental" in Optuna's API-stability sense
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    return SharedRDBStorage(url, retry_s=retry_s, engine_kwargs=engine_kwargs, **beat)
            except (IntegrityError, ProgrammingError):  # another worker made the tables of a new database just now
                races += 1
                if races == 3:
                    raise
            except Exception as e:  # a server restarting as a worker starts: wait a little, not as long as later
                late = time.monotonic() - started > min(retry_s, OPEN_RETRY_S)
                if not is_transient(e) or is_unresolved_host(e) or late:
                    raise
            time.sleep(0.5)
    except ModuleNotFoundError as e:  # the database driver
        raise ConfigError(
            f"cannot open storage {public_url(url)!r}: no driver for it ({e}); for PostgreSQL: "
            "pip install 'poptune[postgres]'"
        ) from e
    except Exception as e:  # server down, authentication, ...
        if is_unresolved_host(e):
            raise ConfigError(f"cannot open storage {public_url(url)!r}: its host {parsed.host!r} does not resolve "
                              "(nothing retried): check the host name") from e
        first = str(e).splitlines()[0] if str(e) else ""
        raise ConfigError(f"cannot open storage {public_url(url)!r}: {type(e).__name__}: {first}") from e


def open_reader(url: str | None = None) -> "optuna.storages.BaseStorage":
    """Open an existing storage to read (no heartbeats); a missing database file is refused, never created.

    Raises:
        ConfigError: no database file at the URL's path (or an empty one), and everything
            :func:`open_storage` refuses.
    """
    url = check_url(url)
    path = file_of(url)
    if path is not None and path.is_dir():
        raise ConfigError(f"{path} is a directory, not a study database: --storage names the database's file "
                          f"({URL_FORMS})")
    if path is not None:
        check_regular(path, "study database")
    if path is not None and (not path.is_file() or path.stat().st_size == 0):
        raise ConfigError(f"no study database at {path}: run `poptune study` first, or name the storage with --storage")
    return open_storage(url, heartbeat=None, writer=False)


def check_storage(url: str | None = None) -> None:
    """Refuse a storage :func:`open_storage` would refuse, without creating anything (no database file).

    A file storage is checked where it lies (a folder, a missing folder, a file that is not an Optuna
    database or journal); a server URL is opened, since that is the only way to know it answers.
    """
    url = check_url(url)
    path = file_of(url)
    if path is None:
        open_storage(url, heartbeat=None, writer=False)
    elif url.startswith("journal:"):
        if not str(path) or not path.parent.exists():
            raise ConfigError(f"journal storage needs an existing folder for its file, got {url!r}")
        _check_journal_path(path)
    elif url != DEFAULT_STORAGE or path.exists():
        _check_sqlite_file(path)


@contextlib.contextmanager
def sole_sqlite_worker(url: str | None) -> Iterator[bool]:
    """Within: this process is the only worker on an SQLite storage's file (no-op for any other storage).

    SQLite serves one worker: two processes on one study would each measure what the other is measuring (its
    locking is per write, not per trial). A second worker is refused with one line naming the storages that
    share safely. The lock is an advisory ``flock`` on the database file itself (SQLite's own locks are POSIX
    record locks, independent of it), so no file is created, and it goes with the process however that ends.

    Yields:
        Whether the lock is held: False for another storage, or an SQLite file that does not exist yet (take
        it again once it does).

    Raises:
        ConfigError: another live process holds the study's database.
    """
    url = url or DEFAULT_STORAGE
    path = file_of(url)
    if path is None or url.startswith("journal:") or not path.is_file():
        yield False
        return
    try:
        import fcntl
    except ImportError:  # not on POSIX: no guard
        yield False
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            raise ConfigError(
                f"another process is running a study on {url}: SQLite serves one worker; to share a study between "
                "processes use --storage journal:PATH (this host) or postgresql://... (several machines)"
            ) from e
        yield True
    finally:
        os.close(fd)  # releases the lock


def _check_journal_path(path: Path) -> None:
    """Refuse a folder, anything but a regular file (a device reads zeros forever, a FIFO blocks) and a file that
    is not a journal."""
    if path.is_dir():
        raise ConfigError(f"{path} is a directory, not a journal file")
    check_regular(path, "journal file")
    check_journal_file(path)


def _open_journal(url: str, beat: dict[str, Any], retry: Any, *, writer: bool) -> "optuna.storages.BaseStorage":
    path = Path(url.removeprefix("journal:"))
    if not str(path) or not path.parent.exists():
        raise ConfigError(f"journal storage needs an existing folder for its file, got {url!r}")
    _check_journal_path(path)
    from poptune.store.journal import cut_partial_record
    from poptune.store.shared import SafeJournalFileBackend, SharedJournalStorage

    try:
        backend = SafeJournalFileBackend(str(path))
        if writer:
            with backend.locked():
                cut_partial_record(path)
        return SharedJournalStorage(backend, stale_trial_callback=retry, **beat)
    except PoptuneError:  # a partial record that cannot be cut
        raise
    except Exception as e:  # a file that is not a journal, or a record Optuna cannot replay
        from poptune.store.journal import bad_record

        fault = bad_record(path) or f"a record Optuna cannot replay ({type(e).__name__}: {e})"
        raise ConfigError(f"journal {path} is corrupt, {fault}: restore it from a copy, or name another "
                          "--storage") from e


def study_names(storage: "optuna.storages.BaseStorage") -> list[str]:
    """The names of the studies ``storage`` holds, sorted."""
    return sorted(s.study_name for s in storage.get_all_studies())


def load_study(storage: "optuna.storages.BaseStorage", name: str | None) -> "optuna.Study":
    """Load study ``name``; with None, the storage's only study. Unknown names list what is there."""
    import optuna

    names = study_names(storage)
    if name is None:
        if len(names) != 1:
            listed = ", ".join(names) or "none"
            raise ConfigError(f"the storage holds {len(names)} studies ({listed}): name one with --study")
        name = names[0]
    if name not in names:
        raise ConfigError(f"no study {name!r} in this storage (studies: {', '.join(names) or 'none'})")
    return optuna.load_study(study_name=name, storage=storage)


def read_study(url: str | None, name: str | None) -> "optuna.Study":
    """Open ``url`` to read (:func:`open_reader`) and load study ``name`` (:func:`load_study`), refusing a study
    that poptune did not write (another tool's study in a shared database) in one line naming what it holds.

    Raises:
        ConfigError: everything :func:`open_reader` and :func:`load_study` refuse, and a study without the
            ``problem`` attribute every poptune study records first.
    """
    study = load_study(open_reader(url), name)
    if not StoredStudy.of(study).recorded:
        attrs = study.user_attrs
        shown = ", ".join(sorted(attrs)[:8]) + (f", ... ({len(attrs)} in all)" if len(attrs) > 8 else "")
        raise ConfigError(
            f"study {study.study_name!r} in {public_url(url)} was not written by poptune (no {PROBLEM_ATTR!r} "
            f"attribute; its attributes: {shown or 'none'}; {len(study.trials)} trials): name a poptune study with "
            "--study"
        )
    StoredStudy.of(study).attrs()  # a study of a newer schema is refused here, in one line
    check_trials(study)  # a trial another tool wrote or changed, too
    return study
