"""``none``: the whole prompt skips the block (its last position still predicts the first token)."""

from __future__ import annotations

from poptune.boundary.rule import BoundaryRule

__all__ = ["RULE"]

RULE = BoundaryRule("none", 0)
