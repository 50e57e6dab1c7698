"""Writing result files: atomically, with one clear error."""

from __future__ import annotations

import os
from pathlib import Path

from poptune.errors import ConfigError

__all__ = ["safe_name", "write_text"]


def safe_name(name: str) -> str:
    """``name`` as a file name: letters, digits, ``-._`` kept, anything else (``@``, ``:``, ``/``) as ``_``."""
    return "".join(c if c.isalnum() or c in "-._" else "_" for c in name)


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write atomically: a temporary file beside the target, then a rename (no half-written file)."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        tmp.write_text(text + "\n")
        os.replace(tmp, target)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise ConfigError(f"cannot write {path}: {e.strerror or e}") from e
