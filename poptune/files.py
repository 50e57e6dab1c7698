"""Writing result files: atomically, with one clear error; and checking, before any work, that they can be."""

from __future__ import annotations

import os
from pathlib import Path

from poptune.errors import ConfigError

__all__ = ["safe_name", "result_name", "write_text", "check_writable_folder", "check_writable_file"]


def safe_name(name: str) -> str:
    """``name`` as a file name: letters, digits, ``-._`` kept, anything else (``@``, ``:``, ``/``) as ``_``."""
    return "".join(c if c.isalnum() or c in "-._" else "_" for c in name)


def result_name(kind: str, study_name: str) -> str:
    """The file stem of a result of ``kind`` on a study: ``<kind>-<model>-<hardware>`` (leaderboards/README.md).

    A study named ``<model>@<hardware>`` (the default) gives ``<kind>-<model>-<hardware>``; one named
    ``<model>@<hardware>:<tag>`` puts the tag into the kind (``<kind>-<tag>-<model>-<hardware>``), so every result
    of one model and machine sorts together; any other name is kept as :func:`safe_name` writes it.
    """
    model, at, hardware = study_name.partition("@")
    hardware, colon, tag = hardware.partition(":")
    if not (at and model and hardware) or (colon and not tag):
        return safe_name(f"{kind}-{study_name}")
    return safe_name("-".join(part for part in (kind, tag, model, hardware) if part))


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write atomically: a temporary file beside the target, then a rename (no half-written file)."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        tmp.write_text(text + "\n")
        os.replace(tmp, target)
    except OSError as e:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass  # the folder refuses the cleanup too (read-only): the one error to report is the write's
        raise ConfigError(f"cannot write {path}: {e.strerror or e}") from e


def check_writable_folder(folder: str | os.PathLike[str]) -> None:
    """Fail now, not after minutes of measuring, if no file can be created in ``folder``.

    A probe file is created and removed at once (permission bits are not enough: root ignores them, a
    read-only mount or a full disk does not).
    """
    folder = Path(folder or ".")
    if not folder.is_dir():
        raise ConfigError(f"{folder} is not an existing folder")
    probe = folder / f".poptune-probe-{os.getpid()}"
    try:
        with open(probe, "x"):
            pass
    except OSError as e:
        raise ConfigError(f"cannot write in {folder}: {e.strerror or e}") from e
    try:
        probe.unlink()
    except OSError:
        pass


def check_writable_file(path: str | os.PathLike[str]) -> None:
    """Fail now if ``path`` cannot be written later: a folder, a missing or read-only folder, a read-only file."""
    target = Path(path)
    if target.is_dir():
        raise ConfigError(f"{path} is a directory, not a file path")
    if not target.parent.exists():
        raise ConfigError(f"the folder of {path} does not exist")
    check_writable_folder(target.parent)
    if target.exists() and not os.access(target, os.W_OK):
        raise ConfigError(f"cannot write {path}: permission denied")
