"""The poptune cache directory: where the embedded model's checkpoint and fitted K/V maps are kept.

The cache is ``$POPTUNE_CACHE`` if set, else the platform's user cache folder for poptune
(``platformdirs.user_cache_dir("poptune")``: ``$XDG_CACHE_HOME/poptune``, by default ``~/.cache/poptune``, on
Linux). Read-only home directories are common in containers: where the cache cannot be written, what would be
kept there goes to a folder under the system's temporary directory instead, said once per process in one
warning line, never a traceback. Reading looks in both places.
"""

from __future__ import annotations

import logging
import os
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
    import platformdirs

    return Path(platformdirs.user_cache_dir("poptune", appauthor=False))


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
