"""Journal files (``journal:PATH``): what makes a file one, and its last record cut when a writer died mid-append.

Optuna appends each journal record as one line (JSON, then a newline). A writer killed mid-append (kill -9, a
full disk, a lost mount) leaves a partial last line. Optuna's reader skips it, but the next append would
continue that line, and the record made of the two halves is not JSON: every later read of the file fails, and
every trial in it is lost. So before anything is appended, :func:`cut_partial_record` moves a partial last
line aside into ``PATH.partial`` (appended to it, never overwritten) and truncates the journal to its last
complete record, saying so in one warning. Readers never call it: they leave the file as it is.

The cut runs under the journal's own lock (Optuna's ``PATH.lock``), which every appending worker holds while
it writes: a partial line seen under the lock is a dead writer's, never a live one's in progress.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import BinaryIO

from poptune.errors import ConfigError, StorageError

__all__ = ["PARTIAL_SUFFIX", "bad_record", "check_journal_file", "cut_partial_record", "partial_record_start"]

log = logging.getLogger(__name__)

#: Where the bytes of a cut record are kept, beside the journal: ``PATH.partial``.
PARTIAL_SUFFIX = ".partial"

#: How a journal record begins (``json.dumps`` of Optuna's log dicts, whose first key is the operation).
_RECORD_START = b'{"op_code":'

_CHUNK = 1 << 16


def check_journal_file(path: Path) -> None:
    """Refuse an existing file that is not an Optuna journal (before the journal appends to it).

    A journal whose only record was cut (its one line has no newline) still is one.
    """
    if not path.exists() or path.stat().st_size == 0:
        return
    try:
        with open(path, "rb") as f:
            first = f.readline(1 << 20)
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror or e}") from e
    if first.startswith(b"SQLite format 3\x00"):
        raise ConfigError(f"{path} is an SQLite database, not a journal file: use --storage sqlite:///{path}")
    if not first.endswith(b"\n") and (first.startswith(_RECORD_START) or _RECORD_START.startswith(first)):
        return  # cut in its first record
    try:
        record = json.loads(first)
    except ValueError:
        record = None
    if not isinstance(record, dict) or "op_code" not in record:
        raise ConfigError(f"{path} is not an Optuna journal file (its first line is not a journal record)")


#: Optuna's journal operations (``JournalOperation``: create study ... discard trials).
_OP_CODES = range(11)


def _record_fault(line: bytes) -> str | None:
    """What is wrong with one journal line (None: it reads as a record)."""
    try:
        record = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError as e:
        return f"byte {e.start} is not UTF-8 text"
    except ValueError as e:
        return f"it is not JSON ({e})"
    if not isinstance(record, dict):
        return f"it is a JSON {type(record).__name__}, not a record (an object)"
    op = record.get("op_code")
    if isinstance(op, bool) or not isinstance(op, int) or op not in _OP_CODES:
        return f"its op_code is {op!r}, not one of Optuna's operations (0-{_OP_CODES[-1]})"
    if not isinstance(record.get("worker_id"), str):
        return "it names no worker_id"
    for key, ops in (("study_id", range(1, 5)), ("trial_id", range(5, 10))):  # what each operation acts on
        if op in ops and (isinstance(record.get(key), bool) or not isinstance(record.get(key), int)):
            return f"its {key} is {record.get(key)!r}, not a number"
    return None


def bad_record(path: str | os.PathLike[str]) -> str | None:
    """The first complete line of the journal at ``path`` that is not a record Optuna can replay, said as
    ``line N: what`` (None: every line reads; a partial last line is the cut's to handle). Asked only once a
    replay failed, so that its message names the line, not Optuna's raw exception (issue 87)."""
    try:
        with open(path, "rb") as f:
            for number, line in enumerate(f, 1):
                fault = _record_fault(line) if line.endswith(b"\n") else None
                if fault:
                    return f"line {number}: {fault}"
    except OSError:
        return None
    return None


def partial_record_start(path: str | os.PathLike[str]) -> int | None:
    """The offset of the journal's partial last record, or None when its last line is a complete record.

    A last line is partial when it does not end with a newline, or is not a JSON object (what a cut leaves
    when the file system kept its newline but not its bytes, e.g. zeros after a crash).
    """
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return None
        start = _line_start(f, size - 1)
        f.seek(start)
        line = f.read()
    if line.endswith(b"\n"):
        try:
            if isinstance(json.loads(line), dict):
                return None
        except ValueError:
            pass
    return start


def _line_start(f: BinaryIO, end: int) -> int:
    """The offset just past the last newline before offset ``end`` of the open file ``f`` (0: none)."""
    pos = end
    while pos > 0:
        step = min(_CHUNK, pos)
        f.seek(pos - step)
        chunk = f.read(step)
        found = chunk.rfind(b"\n")
        if found >= 0:
            return pos - step + found + 1
        pos -= step
    return 0


def cut_partial_record(path: str | os.PathLike[str]) -> int:
    """Move the journal's partial last record (if any) into ``PATH.partial`` and truncate the journal before it.

    The caller holds the journal's lock (:class:`poptune.store.shared.SafeJournalFileBackend` does, and
    :func:`poptune.store.studies.open_storage` takes it for a writer). The bytes are saved (and synced) before
    the journal is truncated: a crash in between keeps them twice, never loses them.

    Returns:
        The number of bytes cut (0: the journal ends with a complete record, or is empty or missing).

    Raises:
        StorageError: the journal or its ``.partial`` file cannot be written (a read-only or full disk).
    """
    path = Path(path)
    if not path.is_file():
        return 0
    start = partial_record_start(path)
    if start is None:
        return 0
    aside = path.with_name(path.name + PARTIAL_SUFFIX)
    try:
        with open(path, "r+b") as f:
            f.seek(start)
            partial = f.read()
            with open(aside, "ab") as kept:
                kept.write(partial)
                kept.flush()
                os.fsync(kept.fileno())
            f.truncate(start)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise StorageError(f"journal {path} ends with a partial record (a writer stopped mid-append) and it cannot "
                           f"be cut: {e.strerror or e}; nothing was appended to it") from e
    log.warning("journal %s: its last record was cut mid-append (%d bytes, a writer stopped while writing): moved "
                "to %s, the journal resumes from its last complete record", path, len(partial), aside)
    return len(partial)
