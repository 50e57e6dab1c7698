"""Storage URLs: the default, which ones several processes may share, and how they are shown.

``sqlite:///PATH`` (the default, ``studies/poptune.db``), any SQLAlchemy URL such as
``postgresql://user@host/db``, and ``journal:PATH`` for a journal file several processes on one host may share.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["DEFAULT_STORAGE", "file_of", "is_server", "public_url", "study_name"]

DEFAULT_STORAGE = "sqlite:///studies/poptune.db"


def study_name(model: str, hardware_id: str) -> str:
    """One study per model and machine kind: ``<model>@<hardware-id>``."""
    return f"{model}@{hardware_id}"


def is_server(url: str | None) -> bool:
    """Whether ``url`` is a storage several processes may share (a journal file or a database server)."""
    url = url or DEFAULT_STORAGE
    return url.startswith("journal:") or ("://" in url and not url.startswith("sqlite:"))


def public_url(url: str | None) -> str:
    """The storage URL (default :data:`DEFAULT_STORAGE`) without its password, for messages and provenance."""
    url = url or DEFAULT_STORAGE
    if "://" in url and "@" in url.split("://", 1)[1]:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    return url


def file_of(url: str) -> Path | None:
    """The file of an SQLite or journal storage URL (None for a server)."""
    if url.startswith("journal:"):
        return Path(url.removeprefix("journal:"))
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        return Path(url.removeprefix("sqlite:///").split("?", 1)[0])
    return None
