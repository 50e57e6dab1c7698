"""Optuna storages that several worker processes can share and survive: retries and heartbeats.

:func:`poptune.store.studies.open_storage` builds these (this module imports Optuna's storage back-ends, so it is only
imported there, when a storage is opened):

- :class:`SharedRDBStorage` (PostgreSQL, SQLite): every storage call is retried with backoff while the
  database is unreachable (a restart, a dropped connection), for up to :data:`poptune.store.studies.RETRY_S` seconds;
  SQLAlchemy checks a pooled connection before use, so the first call after a restart reconnects.
- Both storages give a trial its first heartbeat the moment it starts RUNNING (created, or taken from the
  queue). Optuna's first beat comes from a thread started after ``ask`` and its stale-trial check skips a trial
  that never beat, so a worker killed between the two left a trial RUNNING forever; other workers waiting on
  the study's trial budget would then wait forever too.
- :class:`SharedJournalStorage`: Optuna's journal storage has no heartbeats; here a beat is a trial system
  attribute (the wall-clock time), and a trial whose beat is older than the grace period is stale.
- :class:`SafeJournalFileBackend`: Optuna's journal file, never appended onto a partial record that a writer
  killed mid-append left (:mod:`poptune.store.journal` cuts it first, under the journal's lock).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import BaseStorage, RDBStorage
from optuna.storages._heartbeat import BaseHeartbeat
from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock, JournalStorage
from optuna.trial import FrozenTrial, TrialState

from poptune.store.journal import cut_partial_record

if TYPE_CHECKING:
    from poptune.errors import StorageError

__all__ = ["AbsoluteSymlinkLock", "SafeJournalFileBackend", "SharedRDBStorage", "SharedJournalStorage",
           "is_permanent_sqlite", "is_transient",
           "is_unresolved_host", "journal_error", "storage_error"]

log = logging.getLogger(__name__)

_HEARTBEAT_ATTR = "poptune:heartbeat"


#: SQLite result codes (and their extended ``_...`` forms) that waiting will not cure: a full disk, a read-only
#: file or folder, a corrupt file or one that is not a database, an I/O error. A busy or locked database
#: (another connection writing) is retried.
_SQLITE_PERMANENT = ("SQLITE_FULL", "SQLITE_READONLY", "SQLITE_CORRUPT", "SQLITE_NOTADB", "SQLITE_IOERR",
                     "SQLITE_CANTOPEN", "SQLITE_PERM")
_SQLITE_PERMANENT_TEXT = ("database or disk is full", "readonly database", "disk image is malformed",
                          "file is not a database", "disk I/O error", "unable to open database file")


def _chain(error: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and all(current is not e for e in seen):
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def sqlite_error(error: BaseException) -> BaseException | None:
    """The :mod:`sqlite3` error that caused ``error`` (through SQLAlchemy's wrapping), if any."""
    import sqlite3

    for current in _chain(error):
        orig = getattr(current, "orig", None)
        for candidate in (current, orig):
            if isinstance(candidate, sqlite3.Error):
                return candidate
    return None


def is_permanent_sqlite(error: BaseException) -> bool:
    """Whether ``error`` is an SQLite error that retrying cannot cure (disk full, read-only, corrupt, I/O)."""
    cause = sqlite_error(error)
    if cause is None:
        return False
    name = getattr(cause, "sqlite_errorname", None)
    if name is not None:
        return any(name == code or name.startswith(code + "_") for code in _SQLITE_PERMANENT)
    return any(text in str(cause) for text in _SQLITE_PERMANENT_TEXT)


#: How the PostgreSQL drivers say a host name did not resolve (psycopg 3; libpq through psycopg2).
_UNRESOLVED_TEXT = ("failed to resolve host", "could not translate host name")


def is_unresolved_host(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it) is a server host name that does not resolve: a typo, not a restart."""
    return any(text in str(current) for current in _chain(error) for text in _UNRESOLVED_TEXT)


def is_transient(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it) is a lost or refused database connection, or a busy SQLite
    database: worth retrying. A full disk, a read-only or corrupt SQLite file is not."""
    import sqlalchemy.exc as sa

    if is_permanent_sqlite(error):
        return False
    for current in _chain(error):
        if isinstance(current, (sa.OperationalError, sa.InterfaceError)):
            return True
        if isinstance(current, sa.DBAPIError) and current.connection_invalidated:
            return True
    return False


def storage_error(error: BaseException, url: str) -> "StorageError | None":
    """A one-line :class:`~poptune.errors.StorageError` for a permanent SQLite error (None for any other)."""
    from poptune.errors import StorageError

    if not is_permanent_sqlite(error):
        return None
    cause = sqlite_error(error)
    return StorageError(f"storage {url} failed: {cause} ({getattr(cause, 'sqlite_errorname', 'SQLite error')}); "
                        "nothing is retried: free the disk, make the file writable or restore it, then run the "
                        "same command to resume")


def _retrying(method: Callable[..., Any], name: str) -> Callable[..., Any]:
    import tenacity

    def call(self: "SharedRDBStorage", *args: Any, **kwargs: Any) -> Any:
        def before_sleep(state: tenacity.RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome else None
            log.warning("storage %s failed (%s); retrying in %.1f s", name, str(error).splitlines()[0] if error else "",
                        state.upcoming_sleep)
            self.engine.dispose()  # drop every pooled connection to the old server

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(is_transient),
            wait=tenacity.wait_exponential(multiplier=0.5, max=8.0),  # 0.5, 1, 2, 4, 8, 8, ... s
            stop=tenacity.stop_after_delay(self.retry_s),
            before_sleep=before_sleep,
            reraise=True,
        )
        try:
            return retrying(method, self, *args, **kwargs)
        except Exception as e:
            error = storage_error(e, self.public_url)
            if error is not None:
                raise error from e
            raise

    call.__name__ = name
    call.__doc__ = method.__doc__
    return call


class SharedRDBStorage(RDBStorage):
    """Optuna's RDB storage whose calls survive a database restart (see the module docstring).

    Args:
        url: SQLAlchemy URL.
        retry_s: Seconds to keep retrying a call that fails on a lost connection.
        **kwargs: As :class:`optuna.storages.RDBStorage`.
    """

    def __init__(self, url: str, *, retry_s: float, **kwargs: Any) -> None:
        from poptune.store.urls import public_url

        self.retry_s = retry_s
        self.public_url = public_url(url)
        engine_kwargs = {"pool_pre_ping": True, **kwargs.pop("engine_kwargs", {})}
        super().__init__(url, engine_kwargs=engine_kwargs, **kwargs)

    def _create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> FrozenTrial:
        # Optuna's trial cache calls this one, and create_new_trial does too.
        trial = super()._create_new_trial(study_id, template_trial)
        if self.heartbeat_interval and trial.state == TrialState.RUNNING:
            self.record_heartbeat(trial._trial_id)
        return trial

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        # Optuna skips a RUNNING trial that never beat; a worker killed between creating a trial and its first
        # beat (two commits) leaves one. Such a trial is stale once it is older than the grace period.
        from optuna.storages._rdb import models

        stale = super()._get_stale_trial_ids(study_id)
        grace = self.grace_period or 2 * (self.heartbeat_interval or 0)
        now = _dt.datetime.now()
        session = self.scoped_session()
        try:
            for trial in self.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,)):
                start = trial.datetime_start
                if trial._trial_id in stale or start is None or (now - start).total_seconds() <= grace:
                    continue
                if models.TrialHeartbeatModel.where_trial_id(trial._trial_id, session) is None:
                    stale.append(trial._trial_id)
        finally:
            session.close()
        return stale

    def set_trial_state_values(self, trial_id: int, state: TrialState, values: Sequence[float] | None = None) -> bool:
        try:
            changed = super().set_trial_state_values(trial_id, state, values)
        except UpdateFinishedTrialError:
            # A retried call whose first attempt was committed before the connection dropped.
            if self.get_trial(trial_id).state == state and state.is_finished():
                return False
            raise
        if changed and state == TrialState.RUNNING and self.heartbeat_interval:
            self.record_heartbeat(trial_id)
        return changed


# Every storage call retries, including the private ones that Optuna's trial cache (``_CachedStorage``) makes.
for _name in sorted(
    {*BaseStorage.__abstractmethods__, *BaseHeartbeat.__abstractmethods__, "_get_trials", "_create_new_trial",
     "_set_trial_param", "_get_best_trial_id", "get_n_trials", "get_best_trial", "get_trial_params",
     "get_trial_user_attrs", "get_trial_system_attrs"}
    - {"get_heartbeat_interval", "get_heartbeat_stale_trial_callback"}
):
    setattr(SharedRDBStorage, _name, _retrying(getattr(SharedRDBStorage, _name), _name))


class SharedJournalStorage(JournalStorage, BaseHeartbeat):
    """Optuna's journal storage with heartbeats (see the module docstring).

    Args:
        backend: The journal backend (a file).
        heartbeat_interval: Seconds between beats (None: no heartbeats).
        grace_period: Seconds without a beat after which a RUNNING trial is stale.
        stale_trial_callback: Called with each trial failed as stale (a retry).
    """

    def __init__(
        self,
        backend: Any,
        *,
        heartbeat_interval: int | None = None,
        grace_period: int | None = None,
        stale_trial_callback: Callable[["optuna.Study", FrozenTrial], None] | None = None,
    ) -> None:
        super().__init__(backend)
        self._heartbeat_interval = heartbeat_interval
        self._grace_period = grace_period or (2 * heartbeat_interval if heartbeat_interval else None)
        self._stale_trial_callback = stale_trial_callback

    def create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> int:
        trial_id = super().create_new_trial(study_id, template_trial)
        if self._heartbeat_interval and (template_trial is None or template_trial.state == TrialState.RUNNING):
            self.record_heartbeat(trial_id)
        return trial_id

    def set_trial_state_values(self, trial_id: int, state: TrialState, values: Sequence[float] | None = None) -> bool:
        changed = super().set_trial_state_values(trial_id, state, values)
        if changed and state == TrialState.RUNNING and self._heartbeat_interval:
            self.record_heartbeat(trial_id)
        return changed

    def record_heartbeat(self, trial_id: int) -> None:
        from poptune.errors import StorageError

        try:
            self.set_trial_system_attr(trial_id, _HEARTBEAT_ATTR, time.time())
        except UpdateFinishedTrialError:
            pass  # failed as stale by another worker meanwhile; its end is recorded there
        except StorageError:
            if threading.current_thread() is threading.main_thread():
                raise
            # Optuna's heartbeat thread: its traceback would be one more message; the trial's own next write
            # fails in the main thread with the same line, and a trial that stops beating is retried on resume.

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        assert self._grace_period is not None
        now = time.time()
        stale = []
        for trial in self.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,)):
            beat = trial.system_attrs.get(_HEARTBEAT_ATTR)
            if beat is None and trial.datetime_start is not None:
                beat = trial.datetime_start.timestamp()  # aware (UTC) or naive local time: both are right
            if beat is not None and now - beat > self._grace_period:
                stale.append(trial._trial_id)
        return stale

    def get_heartbeat_interval(self) -> int | None:
        return self._heartbeat_interval

    def get_heartbeat_stale_trial_callback(self) -> Callable[["optuna.Study", FrozenTrial], None] | None:
        return self._stale_trial_callback


class AbsoluteSymlinkLock(JournalFileSymlinkLock):
    """Optuna's journal lock (the link ``PATH.lock`` -> ``PATH``), released after its grace period even when the
    link does not resolve.

    Optuna dates a lock by what its link points to; a link to a relative name (what a relative journal path made
    before poptune resolved it) resolves against the lock's folder, finds nothing, and Optuna then retries at once,
    forever, at full CPU. Here such a lock is dated by the link itself, so a stale one is released after the same
    grace (30 s); ``filepath`` should be absolute, so that new locks always resolve.
    """

    def acquire(self) -> bool:
        mtime, since, sleep_s = None, time.monotonic(), 0.001
        while True:
            try:
                os.symlink(self._lock_target_file, self._lock_file)
                return True
            except FileExistsError:
                pass
            try:
                current = _lock_mtime(self._lock_file)
            except FileNotFoundError:
                continue  # released meanwhile: take it now
            if current != mtime:
                mtime, since = current, time.monotonic()
            elif self.grace_period is not None and time.monotonic() - since > self.grace_period:
                log.warning("journal lock %s was held for over %d s without a write: releasing it (its holder is "
                            "gone)", self._lock_file, self.grace_period)
                with contextlib.suppress(RuntimeError):
                    self.release()
                mtime, sleep_s = None, 0.001
                continue
            time.sleep(sleep_s)
            sleep_s = min(sleep_s * 2, 1.0)


def _lock_mtime(lock: str) -> float:
    """When a journal lock last moved: its journal's last write, or (a link that does not resolve) the link's own."""
    try:
        return os.stat(lock).st_mtime
    except FileNotFoundError:
        return os.lstat(lock).st_mtime  # FileNotFoundError again: the lock is gone


class SafeJournalFileBackend(JournalFileBackend):
    """Optuna's journal file whose appends never continue a partial record (see the module docstring).

    Each append takes the journal's lock (the same ``PATH.lock`` as Optuna's own backend, so workers of either
    kind exclude each other), cuts a partial last record a killed writer left
    (:func:`poptune.store.journal.cut_partial_record`), then appends as Optuna does.

    Args:
        file_path: The journal file (created empty if missing, as Optuna does).
    """

    def __init__(self, file_path: str) -> None:
        file_path = os.path.abspath(file_path)  # the lock's link must resolve from the journal's own folder
        self.lock = AbsoluteSymlinkLock(file_path)
        super().__init__(file_path, self.lock)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Within: this process holds the journal's lock (no other writer is mid-append).

        Raises:
            StorageError: the lock cannot be made (a full disk, a read-only folder).
        """
        try:
            self.lock.acquire()
        except OSError as e:
            raise journal_error(self._file_path, e) from e
        try:
            yield
        finally:
            self.lock.release()

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        """Append ``logs`` whole or not at all: a write that fails (a full disk) is cut off again, then one
        :class:`~poptune.errors.StorageError`, as SQLite's own failures are (nothing is retried)."""
        with self.locked():
            cut_partial_record(self._file_path)
            data = ("\n".join(json.dumps(log, separators=(",", ":")) for log in logs) + "\n").encode("utf-8")
            try:
                fd = os.open(self._file_path, os.O_WRONLY | os.O_APPEND)
            except OSError as e:
                raise journal_error(self._file_path, e) from e
            try:
                start = os.lseek(fd, 0, os.SEEK_END)
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view):]
                    os.fsync(fd)
                except OSError as e:
                    with contextlib.suppress(OSError):
                        os.ftruncate(fd, start)  # no partial record left for the next reader
                    raise journal_error(self._file_path, e) from e
            finally:
                os.close(fd)


def journal_error(path: str, error: OSError) -> "StorageError":
    """The one line a journal write that failed ends in (like :func:`storage_error` for SQLite)."""
    import errno

    from poptune.errors import StorageError

    code = errno.errorcode.get(error.errno or 0, "")
    return StorageError(f"storage journal:{path} failed: {error.strerror or error}{f' ({code})' if code else ''}; "
                        "nothing is retried: free the disk, make the file writable or restore it, then run the same "
                        "command to resume")
