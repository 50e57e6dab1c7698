"""Writing result files: atomically, only as regular files, with one clear error; and checking, before any work,
that they can be.

A result is written to a temporary file beside its target, then renamed onto it. A rename replaces whatever the
target's name is: a device (``/dev/null``), a FIFO, a socket. So a target that exists and is not a regular file
is refused (:func:`check_regular`), and a symbolic link is followed to the file it names (the link is kept, its
file replaced); a link to nothing is refused, since writing through it would create a file wherever it points.
Temporary names are short and fixed in length (``.poptune-<random>.tmp``), so that a target whose name is near
the file system's 255-byte limit can still be written.

What a result records of a file names it as a user types it (:func:`typed_path`: ``../shared/data``,
``~/.cache/...``, ``<tmp>/out``), never by a path of the machine it ran on.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from poptune.errors import ConfigError, PoptuneError

__all__ = ["typed_path", "safe_name", "result_name", "write_text", "replacing", "check_regular",
           "check_writable_folder", "check_writable_file"]


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


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def check_regular(path: str | os.PathLike[str], what: str = "output file") -> Path:
    """The file ``path`` names once symbolic links are followed, if it is a regular file or absent.

    Raises:
        ConfigError: ``path`` is (or links to) a directory, a device, a FIFO or a socket, or is a link to
            nothing; poptune writes only regular files.
    """
    target = Path(path)
    try:
        info = os.stat(target)
    except FileNotFoundError:
        if os.path.islink(target):
            raise ConfigError(f"{path} is a symbolic link to a missing file ({os.readlink(target)}): give the "
                              f"{what}'s own path") from None  # writing through it would create that file
        return target
    except OSError as e:
        raise ConfigError(f"cannot use {path} as a {what}: {e.strerror or e}") from e
    if stat.S_ISDIR(info.st_mode) and what == "output file":
        raise ConfigError(f"{path} is a directory, not a file path")
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"{path} is {_kind(info.st_mode)}, not a regular file: a {what} must be a regular file or "
                          "a new path")
    return Path(os.path.realpath(target)) if os.path.islink(target) else target


@contextlib.contextmanager
def replacing(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Within: a temporary file beside ``path`` to write; on a clean exit it is renamed onto ``path``.

    ``path`` must be a regular file or absent (:func:`check_regular`); the temporary file is removed on any
    failure, which is one :class:`~poptune.errors.ConfigError` for an ``OSError``.
    """
    target = check_regular(path)
    tmp: Path | None = None
    try:
        tmp = _new_temporary(target.parent)
        yield tmp
        check_regular(path)  # not replaced by a device since the check above
        os.replace(tmp, target)
        tmp = None
    except PoptuneError:
        raise
    except OSError as e:
        raise ConfigError(f"cannot write {path}: {e.strerror or e}") from e
    finally:
        if tmp is not None:
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass  # the folder refuses the cleanup too (read-only): the one error to report is the write's


def _new_temporary(folder: Path) -> Path:
    """An empty new file in ``folder`` with a short random name, created with the usual permissions (umask)."""
    for _ in range(100):
        tmp = folder / f".poptune-{secrets.token_hex(6)}.tmp"
        try:
            with open(tmp, "x"):
                return tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name in {folder}")


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write atomically: a temporary file beside the target, then a rename (no half-written file)."""
    with replacing(path) as tmp:
        tmp.write_text(text + "\n")


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
    """Fail now if ``path`` cannot be written later: a folder, a device, a FIFO, a link to nothing, a missing or
    read-only folder, a read-only file."""
    target = check_regular(path)
    if not target.parent.exists():
        raise ConfigError(f"the folder of {path} does not exist")
    check_writable_folder(target.parent)
    if target.exists() and not os.access(target, os.W_OK):
        raise ConfigError(f"cannot write {path}: permission denied")


def typed_path(text: str, *, cwd: str | Path | None = None) -> str:
    """A path as a user types it, with nothing of the machine it is on (the rule
    :func:`poptune.measure.provenance.as_typed` applies to a command's paths): relative ones as they are; absolute
    ones under ``$OUT`` as ``$OUT/...``, under the working directory (``cwd``, default the current one) or its
    parent as relative paths (``../shared/data``), under the home directory as ``~/...``, under the temporary
    folder as ``<tmp>/NAME``, a device (``/dev/...``) as it is, elsewhere as ``<dir>/NAME``."""
    if not text.startswith("/"):
        return text
    here = Path(cwd) if cwd is not None else Path.cwd()
    out = os.environ.get("OUT")
    p = Path(text)
    if out and out.startswith("/") and p.is_relative_to(out):
        return "$OUT" + text[len(out.rstrip("/")):]
    for base, prefix in ((here, ""), (here.parent, "../")):
        if p.is_relative_to(base) and base != Path("/"):
            return prefix + (p.relative_to(base).as_posix() if p != base else ".")
    home = Path.home()
    if home != Path("/") and p.is_relative_to(home):
        return "~/" + p.relative_to(home).as_posix()
    if p.is_relative_to("/dev") or p == Path("/"):
        return text
    return f"<{'tmp' if p.is_relative_to(Path(tempfile.gettempdir()).resolve()) else 'dir'}>/{p.name}"
