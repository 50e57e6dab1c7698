"""``last``: the paper's rule, the last prompt token through the full model, as a first decode step."""

from __future__ import annotations

from poptune.boundary.rule import BoundaryRule

__all__ = ["RULE"]

RULE = BoundaryRule("last", 1)
