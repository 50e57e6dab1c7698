"""The one reader of JSON a user hands poptune (configurations, importance results, prompts, records): bounded.

:func:`loads` parses text as :func:`json.loads` does, but refuses in one line (a :class:`~poptune.errors.ConfigError`,
or the error class its caller names) what would otherwise be a traceback or a silent surprise: an integer of more
than :data:`MAX_DIGITS` digits (Python's own limit raises ``ValueError: Exceeds the limit`` past 4,300, and parses
fewer slowly), nesting deeper than :data:`MAX_DEPTH` (a ``RecursionError`` past about a thousand levels), and a
key given twice in one object (the later one silently wins in :mod:`json`).
"""

from __future__ import annotations

import json
from typing import Any

from poptune.errors import ConfigError

__all__ = ["MAX_DEPTH", "MAX_DIGITS", "loads"]

#: The most digits an integer of a user's JSON may have (a seed, a count: 20 digits reach 2**64).
MAX_DIGITS = 64

#: The deepest nesting of a user's JSON (poptune's files nest a few levels).
MAX_DEPTH = 64


class _Refused(ValueError):
    """What :func:`loads` refuses, with the reason."""


def _integer(text: str) -> int:
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise _Refused(f"an integer of {len(text.lstrip('-'))} digits (at most {MAX_DIGITS})")
    return int(text)


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise _Refused(f"the key {key!r:.60} given twice in one object")
        data[key] = value
    return data


def _depth(data: Any) -> int:
    """The nesting depth of parsed ``data`` (a scalar: 0), walked without recursion."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        value, level = stack.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
        if children is None:
            continue
        deepest = max(deepest, level)
        if deepest > MAX_DEPTH:
            break
        stack.extend((child, level + 1) for child in children)
    return deepest


def loads(text: str, where: str, error: type[Exception] = ConfigError, hint: str = "") -> Any:
    """``text`` parsed as JSON, bounded (module docstring).

    Args:
        text: The JSON text.
        where: What the text is, for the message (``"configuration file x.json"``): ``"{where}: <reason>"``,
            ``"{where} is not JSON (<reason>)"``.
        error: The exception to raise (default :class:`~poptune.errors.ConfigError`).
        hint: Said after the message of text that is not JSON (what the file should hold).

    Raises:
        error: not JSON, an integer too long, nested too deeply, or a key given twice.
    """
    try:
        data = json.loads(text, parse_int=_integer, object_pairs_hook=_object)
    except _Refused as e:
        raise error(f"{where}: {e}") from None
    except json.JSONDecodeError as e:
        raise error(f"{where} is not JSON ({e.msg}, line {e.lineno} column {e.colno}){hint}") from None
    except RecursionError:
        raise error(f"{where}: nested too deeply (at most {MAX_DEPTH} levels)") from None
    if _depth(data) > MAX_DEPTH:
        raise error(f"{where}: nested too deeply (at most {MAX_DEPTH} levels)")
    return data
