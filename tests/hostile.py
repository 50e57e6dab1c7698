"""Hostile paths for output and storage tests, made inside a test's own folder, and a guard for the machine.

:func:`hostile_paths` makes a FIFO, links to ``/dev/null`` and ``/dev/full``, a link to nothing and a folder; a
test points a command at them and :func:`assert_intact` then checks that each is still what it was (and that the
devices are still devices). :func:`guard_renames` makes every ``os.replace``/``os.rename`` whose destination lies
outside the test's folder fail (an ``AssertionError`` a command cannot swallow as a user error), so that a bug
replaces a file of the test's folder at worst, never ``/dev/null`` -- these tests run as root.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

DEVICES = ("/dev/null", "/dev/full")


def hostile_paths(folder: Path) -> dict[str, Path]:
    """``{kind: path}`` inside ``folder``: ``fifo``, ``null`` and ``full`` (links to those devices), ``dangling``
    (a link to a missing file in a missing folder) and ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"fifo": folder / "fifo", "null": folder / "null", "full": folder / "full",
             "dangling": folder / "dangling", "folder": folder / "dir"}
    os.mkfifo(paths["fifo"])
    paths["null"].symlink_to("/dev/null")
    paths["full"].symlink_to("/dev/full" if os.path.exists("/dev/full") else "/dev/null")
    paths["dangling"].symlink_to(folder / "missing" / "x")
    paths["folder"].mkdir()
    return paths


def assert_intact(paths: dict[str, Path]) -> None:
    """Each hostile path is still what :func:`hostile_paths` made, the devices still character devices, and
    nothing was created beside a device."""
    assert stat.S_ISFIFO(os.lstat(paths["fifo"]).st_mode)
    for kind in ("null", "full", "dangling"):
        assert paths[kind].is_symlink(), kind
    assert not paths["dangling"].exists()
    assert paths["folder"].is_dir() and not any(paths["folder"].iterdir())
    for device in DEVICES:
        if os.path.exists(device):
            assert stat.S_ISCHR(os.stat(device).st_mode), f"{device} is no longer a device"
    assert not [p for p in os.listdir("/dev") if p.startswith(("null.", "full.", "null-", "full-"))]


@pytest.fixture
def guard_renames(tmp_path, monkeypatch):
    """Within the test: a rename onto anything outside ``tmp_path`` fails instead of happening."""
    root = os.path.realpath(tmp_path)

    def guarded(real):
        def rename(src, dst, *args, **kwargs):
            target = os.path.realpath(dst)
            if not (target == root or target.startswith(root + os.sep)):
                raise AssertionError(f"a rename onto {target}, outside the test's folder, was stopped")
            return real(src, dst, *args, **kwargs)
        return rename

    monkeypatch.setattr(os, "replace", guarded(os.replace))
    monkeypatch.setattr(os, "rename", guarded(os.rename))
    return tmp_path


def _names(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def refused(capsys, *argv: str, folder: Path | None = None) -> str:
    """Run ``poptune argv``; assert exit 2 in one stderr line with no traceback and, with ``folder``, nothing in
    it added, removed or renamed; return the line."""
    from poptune.cli import main

    before = _names(folder) if folder is not None else None
    try:
        code = main(list(argv))
    except SystemExit as e:  # argparse's own errors
        code = e.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    if folder is not None:
        assert _names(folder) == before
    return err.strip()

