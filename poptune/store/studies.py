"""The one place that opens Optuna storages and reads studies, trials and Pareto fronts.

Storage URLs: ``sqlite:///path.db`` (the default, ``studies/poptune.db``), any SQLAlchemy URL such as
``postgresql://user@host/db`` (Optuna's RDB storage, so PostgreSQL works unchanged), and ``journal:PATH`` for a
journal file that several processes on one host may share. The tuner writes through :func:`open_storage`; the
replay environment, export and leaderboards only read.

Several workers share a study through the storage (PostgreSQL across machines, a journal file on one host);
:mod:`poptune.store.shared` adds what they need beyond Optuna's own storages: retries across a database restart,
heartbeats from a trial's first moment, heartbeats for the journal file.

A database is never modified unless it already is an Optuna database (or does not exist yet): pointing poptune
at any other file (a journal path at a text file too) is refused before anything is written. Readers
(:func:`open_reader`) never create a database. An SQLite file serves one worker process at a time
(:func:`sole_sqlite_worker`); a second one is refused in one line naming the storages that share safely.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from poptune.errors import ConfigError

if TYPE_CHECKING:
    import optuna

__all__ = [
    "DEFAULT_STORAGE",
    "RETRY_S",
    "is_server",
    "FrontRow",
    "open_storage",
    "open_reader",
    "check_storage",
    "sole_sqlite_worker",
    "study_name",
    "study_names",
    "load_study",
    "front",
    "completed",
    "pareto",
    "public_url",
]

DEFAULT_STORAGE = "sqlite:///studies/poptune.db"

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


def study_name(model: str, hardware_id: str) -> str:
    """One study per model and machine kind: ``<model>@<hardware-id>``."""
    return f"{model}@{hardware_id}"


def _check_sqlite_file(path: Path) -> None:
    """Refuse a file that exists and is not an Optuna SQLite database (before Optuna creates tables in it)."""
    if not path.exists():
        if not path.parent.exists():
            raise ConfigError(f"the folder of {path} does not exist")
        return
    if path.is_dir():
        raise ConfigError(f"{path} is a directory, not a database file")
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
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        finally:
            conn.close()
    except sqlite3.Error as e:
        raise ConfigError(f"cannot read {path} as SQLite: {e}") from e
    if tables and not {"studies", "trials", "version_info"} <= tables:
        raise ConfigError(f"{path} is an SQLite database but not an Optuna one (tables: {', '.join(sorted(tables))})")


def is_server(url: str | None) -> bool:
    """Whether ``url`` is a storage several processes may share (a journal file or a database server)."""
    url = url or DEFAULT_STORAGE
    return url.startswith("journal:") or ("://" in url and not url.startswith("sqlite:"))


def open_storage(
    url: str | None = None, *, heartbeat: int | None = HEARTBEAT_S, retry_s: float = RETRY_S
) -> "optuna.storages.BaseStorage":
    """Open ``url`` (default :data:`DEFAULT_STORAGE`) as an Optuna storage several workers may share.

    Args:
        url: ``sqlite:///PATH``, another SQLAlchemy URL, or ``journal:PATH``.
        heartbeat: Seconds between trial heartbeats (None: none, for readers). A trial silent for three
            heartbeats is failed, and retried up to :data:`MAX_RETRY` times, by the next worker that starts a
            trial.
        retry_s: Seconds a database call is retried while the server is unreachable (see
            :mod:`poptune.store.shared`).

    Raises:
        ConfigError: a malformed URL, an unreadable file or one that is not an Optuna database, a server that
            cannot be reached, a missing database driver.
    """
    import optuna

    url = url or DEFAULT_STORAGE
    beat: dict[str, Any] = {}
    retry = None
    if heartbeat:
        from optuna.storages import RetryHeartbeatStaleTrialCallback

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            retry = RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRY)
        beat = {"heartbeat_interval": heartbeat, "grace_period": 3 * heartbeat}
    if url.startswith("journal:"):
        return _open_journal(url, beat, retry)
    if "://" not in url:
        raise ConfigError(f"malformed storage URL {url!r}: use sqlite:///PATH, postgresql://... or journal:PATH")
    try:
        from sqlalchemy.engine import make_url

        parsed = make_url(url)
    except Exception as e:
        raise ConfigError(f"malformed storage URL {url!r}: {e}") from e
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
    from poptune.store.shared import is_transient

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
                if not is_transient(e) or time.monotonic() - started > min(retry_s, OPEN_RETRY_S):
                    raise
            time.sleep(0.5)
    except ModuleNotFoundError as e:  # the database driver
        raise ConfigError(
            f"cannot open storage {public_url(url)!r}: no driver for it ({e}); for PostgreSQL: "
            "pip install 'poptune[postgres]'"
        ) from e
    except Exception as e:  # server down, authentication, ...
        first = str(e).splitlines()[0] if str(e) else ""
        raise ConfigError(f"cannot open storage {public_url(url)!r}: {type(e).__name__}: {first}") from e


def public_url(url: str | None) -> str:
    """The storage URL (default :data:`DEFAULT_STORAGE`) without its password, for messages and provenance."""
    url = url or DEFAULT_STORAGE
    if "://" in url and "@" in url.split("://", 1)[1]:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    return url


def open_reader(url: str | None = None) -> "optuna.storages.BaseStorage":
    """Open an existing storage to read (no heartbeats); a missing database file is refused, never created.

    Raises:
        ConfigError: no database file at the URL's path (or an empty one), and everything
            :func:`open_storage` refuses.
    """
    url = url or DEFAULT_STORAGE
    path = _file_of(url)
    if path is not None and (not path.is_file() or path.stat().st_size == 0):
        raise ConfigError(f"no study database at {path}: run `poptune study` first, or name the storage with --storage")
    return open_storage(url, heartbeat=None)


def check_storage(url: str | None = None) -> None:
    """Refuse a storage :func:`open_storage` would refuse, without creating anything (no database file).

    A file storage is checked where it lies (a folder, a missing folder, a file that is not an Optuna
    database or journal); a server URL is opened, since that is the only way to know it answers.
    """
    url = url or DEFAULT_STORAGE
    path = _file_of(url)
    if path is None:
        open_storage(url, heartbeat=None)
    elif url.startswith("journal:"):
        if not str(path) or not path.parent.exists():
            raise ConfigError(f"journal storage needs an existing folder for its file, got {url!r}")
        if path.is_dir():
            raise ConfigError(f"{path} is a directory, not a journal file")
        _check_journal_file(path)
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
    path = _file_of(url)
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


def _file_of(url: str) -> Path | None:
    """The file of an SQLite or journal storage URL (None for a server)."""
    if url.startswith("journal:"):
        return Path(url.removeprefix("journal:"))
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        return Path(url.removeprefix("sqlite:///").split("?", 1)[0])
    return None


def _check_journal_file(path: Path) -> None:
    """Refuse an existing file that is not an Optuna journal (before the journal appends to it)."""
    if not path.exists() or path.stat().st_size == 0:
        return
    try:
        with open(path, "rb") as f:
            first = f.readline(1 << 20)
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror or e}") from e
    if first.startswith(b"SQLite format 3\x00"):
        raise ConfigError(f"{path} is an SQLite database, not a journal file: use --storage sqlite:///{path}")
    try:
        record = json.loads(first)
    except ValueError:
        record = None
    if not isinstance(record, dict) or "op_code" not in record:
        raise ConfigError(f"{path} is not an Optuna journal file (its first line is not a journal record)")


def _open_journal(url: str, beat: dict[str, Any], retry: Any) -> "optuna.storages.BaseStorage":
    path = Path(url.removeprefix("journal:"))
    if not str(path) or not path.parent.exists():
        raise ConfigError(f"journal storage needs an existing folder for its file, got {url!r}")
    if path.is_dir():
        raise ConfigError(f"{path} is a directory, not a journal file")
    _check_journal_file(path)
    from optuna.storages.journal import JournalFileBackend

    from poptune.store.shared import SharedJournalStorage

    try:
        return SharedJournalStorage(JournalFileBackend(str(path)), stale_trial_callback=retry, **beat)
    except Exception as e:  # a file that is not a journal
        raise ConfigError(f"cannot open journal {path}: {e}") from e


def study_names(storage: "optuna.storages.BaseStorage") -> list[str]:
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


def completed(study: "optuna.Study", method: str | None = "pop") -> list["optuna.trial.FrozenTrial"]:
    """Completed trials of ``method`` (default POP's own; None: every method, baselines too) in number order.

    Baselines are stored in the study of their model and machine as trials with a ``method`` user attribute
    and no search parameters; trials without the attribute are POP's.
    """
    import optuna

    trials = sorted(study.get_trials(deepcopy=False, states=[optuna.trial.TrialState.COMPLETE]),
                    key=lambda t: t.number)
    if method is None:
        return trials
    return [t for t in trials if t.user_attrs.get("method", "pop") == method]


def pareto(trials: list["optuna.trial.FrozenTrial"]) -> list["optuna.trial.FrozenTrial"]:
    """The trials no other trial dominates on (latency objective: minimise, accuracy: maximise)."""

    def dominates(a: Any, b: Any) -> bool:
        return a.values[0] <= b.values[0] and a.values[1] >= b.values[1] and tuple(a.values) != tuple(b.values)

    return [t for t in trials if not any(dominates(other, t) for other in trials)]


@dataclass(frozen=True)
class FrontRow:
    """One Pareto-optimal configuration as stored (its confirmed figures where the study has them).

    ``speedup_lo``/``speedup_hi``: the 95% interval of the speedup (None for trials stored before intervals);
    ``pairs``: how many pairs it rests on; ``confirmed``: the figures come from the confirmation pass.
    ``prefill_ms`` is the latency objective (the study's reference full-model TTFT over the speedup);
    ``ttft_ms`` and ``full_ttft_ms`` are the raw p50 times to first token of the configuration and of its
    paired full model as the trial measured them (expected over the workload's prompt lengths).
    """

    trial: int
    skip: int
    boundary: str
    offset: int
    method: str
    prefill_ms: float
    speedup: float
    accuracy: float
    drop: float
    feasible: bool
    drop_lo: float | None = None
    drop_hi: float | None = None
    items: int | None = None
    speedup_lo: float | None = None
    speedup_hi: float | None = None
    pairs: int | None = None
    ideal: float | None = None
    confirmed: bool = False
    ttft_ms: float | None = None
    full_ttft_ms: float | None = None

    @classmethod
    def from_trial(cls, trial: "optuna.trial.FrozenTrial", confirmed: dict[str, Any] | None = None,
                   reference_ms: float | None = None) -> "FrontRow":
        """The row of ``trial``; with ``confirmed`` figures (and the study's reference latency) those instead."""
        attrs = trial.user_attrs
        config = attrs["config"]
        target = attrs.get("latency", {}).get(str(attrs.get("target_length")), {})
        if attrs.get("latency_weights"):  # a workload-weighted trial: its combined figures
            ci = attrs.get("speedup_ci") or (None, None)
            target = {"speedup": attrs["speedup"], "speedup_lo": ci[0], "speedup_hi": ci[1],
                      "pairs": attrs.get("pairs"), "ideal": attrs.get("ideal")}
        figures = confirmed or target
        speedup = float(figures.get("speedup", attrs["speedup"]))
        prefill_ms = trial.values[0]
        if confirmed and reference_ms:
            prefill_ms = reference_ms / speedup
        return cls(
            trial=trial.number,
            skip=config["skip"],
            boundary=config["boundary"],
            offset=config["offset"],
            method=attrs.get("method", "pop"),
            prefill_ms=prefill_ms,
            speedup=speedup,
            accuracy=trial.values[1],
            drop=attrs["drop_points"],
            feasible=bool(attrs.get("feasible", True)),
            drop_lo=(attrs.get("drop") or {}).get("lo"),
            drop_hi=(attrs.get("drop") or {}).get("hi"),
            items=sum(attrs["items"].values()) if attrs.get("items") else None,
            speedup_lo=figures.get("speedup_lo"),
            speedup_hi=figures.get("speedup_hi"),
            pairs=figures.get("pairs"),
            ideal=figures.get("ideal", target.get("ideal")),
            confirmed=bool(confirmed),
            ttft_ms=attrs.get("prefill_ms"),
            full_ttft_ms=attrs.get("full_ms"),
        )


def _trusted(trial: "optuna.trial.FrozenTrial", confirmed: dict[str, Any] | None) -> bool:
    """Not marked noisy (or confirmed since) and not confirmed above its ideal."""
    if confirmed is not None:
        return not confirmed.get("above_ideal")
    return not trial.user_attrs.get("noisy")


def front(study: "optuna.Study", *, confirmed: bool = True) -> list[FrontRow]:
    """POP's Pareto front (feasible trials only when the study has an accuracy budget), fastest first.

    Trials marked ``noisy`` (a failed null check, a speedup above its ideal) are left out. With ``confirmed``
    (the default) the confirmation pass's figures (study attribute ``confirmation``) replace the trials' own and
    the front is recomputed from them; a configuration confirmed above its ideal is left out too. A
    configuration measured by several trials counts once: its confirmed trial, else its first trusted one.
    """
    figures = study.user_attrs.get("confirmation", {}).get("trials", {}) if confirmed else {}
    reference = study.user_attrs.get("reference_prefill_ms")
    rows: dict[tuple, FrontRow] = {}
    for trial in completed(study):
        if not trial.user_attrs.get("feasible", True) or "reused_from" in trial.user_attrs:
            continue
        mine = figures.get(str(trial.number))
        if not _trusted(trial, mine):
            continue
        row = FrontRow.from_trial(trial, mine, reference)
        key = (row.method, row.skip, row.boundary, row.offset)
        if key not in rows or (row.confirmed and not rows[key].confirmed):
            rows[key] = row
    candidates = list(rows.values())

    def dominates(a: FrontRow, b: FrontRow) -> bool:
        return (a.prefill_ms <= b.prefill_ms and a.accuracy >= b.accuracy
                and (a.prefill_ms, a.accuracy) != (b.prefill_ms, b.accuracy))

    best = [r for r in candidates if not any(dominates(o, r) for o in candidates)]
    return sorted(best, key=lambda r: (r.prefill_ms, -r.accuracy, r.trial))
