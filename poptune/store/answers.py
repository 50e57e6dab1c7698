"""The full model's answers remembered: an item's outcome keyed by everything that decides it.

A study scores the full model on every item it races or certifies, and a later study, a re-certification or
``poptune compare`` on the same items would score it again. What the full model answers on an item depends only
on its weights, the task and the item, how the item is prompted and scored (batching, lengths, seed, data
file, dtype and device) and the code that scores it -- so an outcome stored under a key of all of these is
read instead of recomputed. A change to any of them is another key: the stored answer is then missed, never
served stale. :data:`SCORING_VERSION` is bumped whenever the scoring code changes what an item scores.

The answers live in one SQLite file beside the study's storage file (``studies/full-answers.sqlite`` for the
default ``sqlite:///studies/poptune.db``; none for a database server), which several processes may share (one
row per item, each write a transaction). ``poptune study --forget-answers`` clears it.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from poptune.errors import StorageError
from poptune.store.urls import file_of

__all__ = ["ANSWERS_FILE", "SCORING_VERSION", "FullAnswers", "answers_path", "check_answers_file", "item_key"]

#: The answers file's name, beside a study's storage.
ANSWERS_FILE = "full-answers.sqlite"

#: Bumped whenever poptune's scoring changes what an item scores: answers stored before are then missed.
SCORING_VERSION = 4  # 2: the CPU's LM head for a few rows is weight @ hidden.T (poptune.models.head); 3: the full
# model's likelihood of its own answer scored by one forward after its prefill (poptune.engine.speculate); 4: an
# lm-eval task's items named by their own index (before, items asked out of order came back under each other's)

#: Seconds a write waits for another process's transaction.
_TIMEOUT_S = 20.0


def answers_path(storage: str) -> Path | None:
    """Where the full model's answers of studies in ``storage`` are kept: beside its file (None for a database
    server or memory, whose studies remember nothing on this machine's disk)."""
    found = file_of(storage)
    return None if found is None else found.parent / ANSWERS_FILE


def check_answers_file(path: Path) -> None:
    """Refuse an answers file that could not be read or written: a folder, a FIFO, a device, a link to nothing,
    text or another database (whose file the answers' table would be added to). Checked before a study loads its
    model or writes its storage (issue 87: the refusal came after both).

    Raises:
        ConfigError: one line naming the file and what it is.
    """
    from poptune.errors import ConfigError
    from poptune.store.studies import check_sqlite_file

    try:
        check_sqlite_file(path, frozenset({"answers"}), "poptune's full-model answers")
    except ConfigError as e:
        raise ConfigError(f"the full model's answers beside the storage: {e}: move it away") from None


def item_key(settings: Mapping[str, Any], task: str, item: int) -> str:
    """The key of one item's full-model outcome: ``settings`` (weights, prompting, scoring, versions) and the item."""
    text = json.dumps({"settings": dict(settings), "task": task, "item": int(item), "version": SCORING_VERSION},
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class FullAnswers:
    """The full model's outcomes by :func:`item_key`, in one SQLite file.

    Args:
        path: The file (created with its folder on the first write).
        settings: What the outcomes depend on besides the task and item (see the module docstring).

    Attributes:
        read, written: Outcomes served and stored by this instance.
    """

    def __init__(self, path: str | Path, settings: Mapping[str, Any]) -> None:
        self.path = Path(path)
        self.settings = dict(settings)
        self.read = self.written = 0

    def _connect(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, timeout=_TIMEOUT_S)
            db.execute("CREATE TABLE IF NOT EXISTS answers (key TEXT PRIMARY KEY, outcome REAL NOT NULL)")
        except (OSError, sqlite3.Error) as e:
            raise StorageError(f"cannot open the full model's answers {self.path}: {e}") from e
        return db

    def get(self, task: str, items: Iterable[int]) -> dict[int, float]:
        """The stored outcomes of ``items`` of ``task`` (those not stored are left out)."""
        keys = {item_key(self.settings, task, i): int(i) for i in items}
        if not keys or not self.path.exists():
            return {}
        found: dict[int, float] = {}
        db = self._connect()
        try:
            wanted = list(keys)
            for start in range(0, len(wanted), 500):  # SQLite's bound-parameter limit
                part = wanted[start:start + 500]
                rows = db.execute(f"SELECT key, outcome FROM answers WHERE key IN ({','.join('?' * len(part))})", part)
                found.update((keys[k], float(v)) for k, v in rows)
        except sqlite3.Error as e:
            raise StorageError(f"cannot read the full model's answers {self.path}: {e}") from e
        finally:
            db.close()
        self.read += len(found)
        return found

    def put(self, task: str, outcomes: Mapping[int, float]) -> None:
        """Store ``outcomes`` (item -> outcome) of ``task``; an item stored already keeps its first outcome."""
        if not outcomes:
            return
        db = self._connect()
        try:
            with db:
                db.executemany("INSERT OR IGNORE INTO answers (key, outcome) VALUES (?, ?)",
                               [(item_key(self.settings, task, i), float(v)) for i, v in outcomes.items()])
        except sqlite3.Error as e:
            raise StorageError(f"cannot store the full model's answers in {self.path}: {e}") from e
        finally:
            db.close()
        self.written += len(outcomes)

    def clear(self) -> int:
        """Forget every stored answer (of any settings); returns how many there were."""
        if not self.path.exists():
            return 0
        db = self._connect()
        try:
            with db:
                count = int(db.execute("SELECT COUNT(*) FROM answers").fetchone()[0])
                db.execute("DELETE FROM answers")
        except sqlite3.Error as e:
            raise StorageError(f"cannot clear the full model's answers {self.path}: {e}") from e
        finally:
            db.close()
        return count
