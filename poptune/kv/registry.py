"""The K/V sources by name: the one place that lists them (a new source is one module and one line here).

Everything that needs a source -- ``PopConfig`` validating ``kv``, the engine writing the pruned tokens' K/V,
the search space, ``--kv``, exports, labels in reports -- asks :func:`source` (which also checks a name: the one
check) or reads :data:`NAMES`, the one list of names (no other module keeps its own copy); a test
(``tests/kv/test_registry_homes.py``) finds no source named, and no source's behaviour, anywhere else in the package,
and one contract test (``tests/kv/test_contract.py``) runs over every source listed here.
"""

from __future__ import annotations

from collections.abc import Iterable

from poptune.errors import ConfigError
from poptune.kv import anchor, calibrated, own
from poptune.kv.source import KVSource

__all__ = ["DEFAULT", "NAMES", "SOURCES", "distinct_at", "is_default", "source"]

#: Every source, the default first. An index into it names a source (an environment's action): new ones last.
SOURCES: tuple[KVSource, ...] = (
    own.SOURCE,
    calibrated.SOURCE,
    anchor.SOURCE,
)

#: Their names, in that order.
NAMES: tuple[str, ...] = tuple(s.name for s in SOURCES)

#: The paper's K/V: what a configuration without ``kv`` means (stored configurations omit it).
DEFAULT: str = NAMES[0]

_BY_NAME = {s.name: s for s in SOURCES}


def source(name: str, *, what: str = "`kv`") -> KVSource:
    """The source called ``name``, or :class:`ConfigError` naming them all (``what``: what held the name, for the
    message)."""
    found = _BY_NAME.get(name) if isinstance(name, str) else None
    if found is None:
        raise ConfigError(f"{what} must be one of {', '.join(NAMES)}, got {name!r}")
    return found


def is_default(name: str) -> bool:
    """Whether ``name`` is the default source (the paper's K/V)."""
    return name == DEFAULT


def distinct_at(skip: int, names: Iterable[str]) -> tuple[str, ...]:
    """The configurations ``names`` give at ``skip`` skipped layers, each once: a source that differs from the
    default only from more skipped layers (:attr:`KVSource.min_skip`) is the default there."""
    return tuple(dict.fromkeys(n if skip >= source(n).min_skip else DEFAULT for n in names))
