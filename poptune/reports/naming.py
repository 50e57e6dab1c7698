"""The names of a study's summary and plot, so that two studies never share them (issue 57).

A report is written beside its storage and named after the storage and the study:
``<storage>.<study>.md`` and ``<storage>.<study>.pareto.png``, each part as :func:`poptune.files.safe_name`
writes it (``<storage>`` is the SQLite or journal file's name without its suffix, a server's database name).
Cleaning is lossy (``a=b`` and ``a<newline>b`` both clean to ``a_b``) and two storages may share a stem
(``s.db``, ``s.journal``), so each summary ends with a line naming its study and storage
(:func:`owner_line`); a name whose summary (or plot, without a summary) belongs to another study is not used,
and the report takes the name with a short hash of its study and storage added instead. A write never replaces
another study's report.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from poptune.errors import ConfigError
from poptune.files import safe_name
from poptune.store.urls import DEFAULT_STORAGE, file_of, public_url

__all__ = ["report_paths", "owner_line", "storage_label"]

#: The longest stem a report takes (its plot adds ``.pareto.png``; file systems take 255 bytes).
_STEM_MAX = 200

_OWNER = re.compile(r"^<!-- poptune report: (\{.*\}) -->$")


def storage_label(storage: str | None) -> str:
    """What names a storage in its reports: its file's name without the suffix, or a server's database name."""
    url = storage or DEFAULT_STORAGE
    path = file_of(url)
    if path is not None:
        return path.stem or path.name or "storage"
    database = url.rsplit("/", 1)[-1].split("?", 1)[0]
    return database or "storage"


def _identity(storage: str | None, study: str) -> dict[str, str]:
    url = storage or DEFAULT_STORAGE
    path = file_of(url)
    return {"study": study, "storage": path.name if path is not None else public_url(url)}


def owner_line(storage: str | None, study: str) -> str:
    """The summary's last line: an HTML comment naming its study and storage (``--`` escaped inside it)."""
    text = json.dumps(_identity(storage, study), ensure_ascii=False, sort_keys=True).replace("--", "-\\u002d")
    return f"<!-- poptune report: {text} -->"


def _owner(md: Path) -> dict[str, str] | None:
    """The study and storage a summary names (None: none readable, so not known to be ours)."""
    try:
        with open(md, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 65536))
            tail = f.read().decode("utf-8", "replace").rstrip("\n").rsplit("\n", 1)[-1]
        match = _OWNER.match(tail)
        found = json.loads(match.group(1)) if match else None
    except (OSError, ValueError, RecursionError):
        return None
    return found if isinstance(found, dict) else None


def _free(base: Path, identity: dict[str, str]) -> bool:
    md, png = base.with_name(base.name + ".md"), base.with_name(base.name + ".pareto.png")
    if md.exists() or md.is_symlink():
        return _owner(md) == identity
    return not (png.exists() or png.is_symlink())


def report_paths(folder: str | Path, storage: str | None, study: str) -> tuple[Path, Path]:
    """The summary and plot paths of ``study`` in ``storage``, in ``folder``: ``<storage>.<study>``, else that
    with a hash of the study and storage when the name is another study's or too long.

    Raises:
        ConfigError: both names hold another study's report (not seen in practice: the hash tells them apart).
    """
    identity = _identity(storage, study)
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode("utf-8", "surrogatepass")).hexdigest()[:10]
    stem = f"{safe_name(storage_label(storage))}.{safe_name(study)}"
    candidates = [stem] if len(stem.encode("utf-8", "surrogateescape")) <= _STEM_MAX else []
    candidates.append(f"{stem.encode('utf-8', 'surrogateescape')[:_STEM_MAX - 11].decode('utf-8', 'ignore')}"
                      f"-{digest}")
    for name in candidates:
        base = Path(folder) / name
        if _free(base, identity):
            return base.with_name(name + ".md"), base.with_name(name + ".pareto.png")
    raise ConfigError(f"the report names {', '.join(n + '.md' for n in candidates)} in {folder} hold another "
                      "study's report: move them away to write this study's")
