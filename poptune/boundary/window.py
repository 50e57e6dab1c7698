"""``window-<W>``: the last W prompt tokens through the full model, for any positive W (:func:`parse`)."""

from __future__ import annotations

import re

from poptune.boundary.rule import BoundaryRule

__all__ = ["FORM", "parse", "window"]

#: How a window's name is written, for messages.
FORM = "window-<W>"

_NAME = re.compile(r"^window-([1-9][0-9]*)$")


def window(width: int) -> BoundaryRule:
    """The window of the last ``width`` tokens."""
    return BoundaryRule(f"window-{width}", width)


def parse(name: str) -> BoundaryRule | None:
    """The window ``name`` names, or None."""
    match = _NAME.match(name)
    return window(int(match.group(1))) if match else None
