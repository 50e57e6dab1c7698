"""A locked SQLite file is waited on as long as docs/reliability.md says (issue 57): the check before a study opens
its database took sqlite3's own 5 s busy timeout, not :data:`poptune.store.studies.SQLITE_BUSY_S`."""

from __future__ import annotations

import sqlite3
import time

import pytest

from poptune.errors import ConfigError
from poptune.store import studies


def test_the_file_check_waits_on_a_lock_as_long_as_every_sqlite_call(tmp_path, monkeypatch):
    path = tmp_path / "s.db"
    holder = sqlite3.connect(path)
    holder.execute("CREATE TABLE studies (x)")
    holder.commit()
    holder.execute("BEGIN EXCLUSIVE")  # another process writing: readers wait, then are refused
    monkeypatch.setattr(studies, "SQLITE_BUSY_S", 1.0)
    start = time.monotonic()
    try:
        with pytest.raises(ConfigError, match="locked"):
            studies._check_sqlite_file(path)
    finally:
        holder.rollback()
        holder.close()
    assert 0.9 <= time.monotonic() - start < 4.0  # the constant's wait, not sqlite3's default 5 s


def test_the_documented_busy_wait_is_the_constant():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "reliability.md").read_text()
    assert f"{studies.SQLITE_BUSY_S} s" in text
