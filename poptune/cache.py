"""The poptune cache directory: where the embedded model's checkpoint and fitted K/V maps are kept.

The cache is ``$POPTUNE_CACHE`` if set, else the platform's user cache folder for poptune: on Linux and other
POSIX systems ``$XDG_CACHE_HOME/poptune``, by default ``~/.cache/poptune`` (the XDG rule, computed here, so that
no third-party package is imported: a GPU machine's image may lack ``platformdirs``); on macOS and Windows
``platformdirs.user_cache_dir("poptune")``, or ``~/.cache/poptune`` where platformdirs is not installed.
Read-only home directories are common in containers: where the cache cannot be written, what would be kept
there goes to a folder under the system's temporary directory instead, said once per process in one warning
line, never a traceback. Reading looks in both places.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from pathlib import Path

__all__ = ["ENV_VAR", "cache_dir", "cache_dirs", "fallback_dir", "warn_unwritable", "writable_cache_dir"]

log = logging.getLogger(__name__)

#: The environment variable that names the cache directory.
ENV_VAR = "POPTUNE_CACHE"

_warned: set[str] = set()  # primary folders already said to be unwritable (one warning per process and folder)


def cache_dir() -> Path:
    """The configured cache directory (``$POPTUNE_CACHE``, else the platform's user cache folder); not checked."""
    chosen = os.environ.get(ENV_VAR)
    if chosen:
        return Path(chosen).expanduser()
    if sys.platform not in ("darwin", "win32"):
        return _xdg_cache_home() / "poptune"
    try:
        import platformdirs
    except ImportError:
        return Path("~/.cache/poptune").expanduser()
    return Path(platformdirs.user_cache_dir("poptune", appauthor=False))


def _xdg_cache_home() -> Path:
    """``$XDG_CACHE_HOME`` where set and not blank, else ``~/.cache`` (platformdirs' rule on Linux)."""
    chosen = os.environ.get("XDG_CACHE_HOME", "")
    return Path(chosen) if chosen.strip() else Path("~/.cache").expanduser()


def fallback_dir() -> Path:
    """The folder used when the cache cannot be written: ``<tmp>/poptune-cache-<user id>``."""
    user = os.getuid() if hasattr(os, "getuid") else os.environ.get("USERNAME", "user")
    return Path(tempfile.gettempdir()) / f"poptune-cache-{user}"


def cache_dirs() -> tuple[Path, ...]:
    """Where cached files are looked for, in order: the cache directory, then the fallback folder."""
    return tuple(dict.fromkeys((cache_dir(), fallback_dir())))


def _writable(folder: Path) -> bool:
    """Whether ``folder`` exists (made if needed) and a file can be created in it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".probe-"):
            return True
    except OSError:
        return False


def writable_cache_dir() -> Path:
    """The cache directory if it can be written, else the fallback folder (one warning line per process).

    Raises:
        OSError: neither the cache directory nor the fallback folder can be written.
    """
    primary = cache_dir()
    if _writable(primary):
        return primary
    fallback = fallback_dir()
    fallback.mkdir(parents=True, exist_ok=True)
    warn_unwritable(primary, fallback)
    return fallback


def warn_unwritable(folder: Path, instead: Path | None) -> None:
    """Say once per process, in one line, that ``folder`` cannot be written and ``instead`` is used (None: nothing
    is kept)."""
    if str(folder) in _warned:
        return
    _warned.add(str(folder))
    where = f"keeping cached files in {instead} for now" if instead is not None else "nothing is kept"
    log.warning("poptune: warning: the cache %s cannot be written; %s (set %s to a writable folder)", folder, where,
                ENV_VAR)
