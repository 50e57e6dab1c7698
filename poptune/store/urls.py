"""Storage URLs: the default, which ones several processes may share, and how they are shown.

``sqlite:///PATH`` (the default, ``studies/poptune.db``), a PostgreSQL SQLAlchemy URL such as
``postgresql://user@host/db`` (or ``postgresql+psycopg2://...``), and ``journal:PATH`` for a journal file several
processes on one host may share. Any other scheme is refused (:func:`check_url`).

Study names become file names (a study's report, its leaderboard files): :func:`check_study_name` refuses the
names that cannot be one.
"""

from __future__ import annotations

from pathlib import Path

from poptune.errors import ConfigError
from poptune.files import safe_name

__all__ = ["DEFAULT_STORAGE", "URL_FORMS", "check_study_name", "check_url", "file_of", "is_server", "public_url",
           "study_name"]

DEFAULT_STORAGE = "sqlite:///studies/poptune.db"

#: The storage URLs poptune opens, as every message about a URL names them.
URL_FORMS = "sqlite:///PATH, postgresql://USER@HOST/DB or journal:PATH"

#: SQLAlchemy back-ends poptune opens (others may work through Optuna but are neither tested nor supported).
_BACKENDS = ("sqlite", "postgresql")

#: The most a study name adds around itself in a file name: the leaderboard's ``study-methods-NAME.csv`` (files
#: are written through short temporary names, :func:`poptune.files.replacing`).
_NAME_AFFIXES = len("study-methods-") + len(".csv")

#: The longest file name most file systems take, in bytes.
_NAME_MAX = 255


def study_name(model: str, hardware_id: str) -> str:
    """One study per model and machine kind: ``<model>@<hardware-id>``."""
    return f"{model}@{hardware_id}"


def check_study_name(name: str | None) -> str | None:
    """``name`` if it can name a study (None: the default name), else a :class:`~poptune.errors.ConfigError`.

    A study's report and leaderboard files are named after it (:func:`poptune.files.safe_name`), so a name is
    refused that is empty, ``.`` or ``..``, holds ``/`` or a NUL, or makes a file name longer than 255 bytes.
    """
    if name is None:
        return None
    shown = name if len(name) <= 60 else f"{name[:40]}... ({len(name)} characters)"
    if not name.strip():
        raise ConfigError("a study name must not be empty")
    if not name.isprintable():
        raise ConfigError(f"study name {shown!r} must not hold a line break, tab or other control character")
    if name in (".", "..") or "/" in name or "\0" in name:
        raise ConfigError(f"study name {shown!r} cannot name its report files: it must not be '.' or '..' nor "
                          "hold '/'")
    size = len(safe_name(name).encode("utf-8", "surrogateescape"))
    if size + _NAME_AFFIXES > _NAME_MAX:
        raise ConfigError(f"study name {shown!r} is too long to name its report files: {size} bytes, at most "
                          f"{_NAME_MAX - _NAME_AFFIXES}")
    return name


def check_url(url: str | None) -> str:
    """``url`` (default :data:`DEFAULT_STORAGE`) if it is a storage URL poptune opens, else a one-line
    :class:`~poptune.errors.ConfigError` naming :data:`URL_FORMS`."""
    url = url or DEFAULT_STORAGE
    if url.startswith("journal:"):
        return url
    if "://" not in url:
        raise ConfigError(f"malformed storage URL {url!r}: use {URL_FORMS}")
    try:
        from sqlalchemy.engine import make_url

        parsed = make_url(url)
        backend = parsed.get_backend_name()
    except Exception as e:
        raise ConfigError(f"malformed storage URL {url!r}: {e}") from e
    if backend not in _BACKENDS:
        raise ConfigError(f"unsupported storage URL {public_url(url)!r} ({backend}): use {URL_FORMS}")
    if backend == "sqlite":
        _check_sqlite_url(url, parsed.database, dict(parsed.query))
    return url


def _check_sqlite_url(url: str, database: str | None, query: dict[str, object]) -> None:
    """Refuse an SQLite URL that cannot keep a study (in memory: gone when the command ends) or whose options
    poptune would not honour (it opens the file itself: ``?mode=ro`` would be ignored), in one line."""
    if not database or database == ":memory:" or query.get("mode") == "memory":
        raise ConfigError(f"storage {url!r} is an in-memory SQLite database: nothing would be kept when the command "
                          "ends: it needs a file path, sqlite:///PATH")
    if query:
        raise ConfigError(f"storage {url!r}: SQLite URL options ({', '.join(sorted(query))}) are not honoured "
                          "(poptune opens the file itself; readers never write); give sqlite:///PATH without `?...`")


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
