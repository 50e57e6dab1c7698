"""The boundary contract (:class:`BoundaryRule`): which tokens of a prompt segment go deep, and its FLOPs share.

A rule keeps the last :attr:`~BoundaryRule.width` tokens of every prompt segment at full depth (all of a shorter
segment) and prunes the rest: they skip the block (their K/V written as the configuration's K/V source says). Every
user asks the contract, never a rule's name or position: the engine (:meth:`~BoundaryRule.pruned`), chunked prefill
(the last chunk holds the width), the FLOPs ideal (:meth:`~BoundaryRule.pruned_share`), the search's order (more
tokens at full depth: :meth:`~BoundaryRule.order`, never deeper in accuracy, never faster).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BoundaryRule"]


@dataclass(frozen=True)
class BoundaryRule:
    """One boundary rule.

    Attributes:
        name: What a configuration's ``boundary`` holds, and what reports print.
        width: The final prompt tokens of a segment that run at full depth (0: every token is pruned).
    """

    name: str
    width: int

    def deep(self, length: int) -> int:
        """How many of a ``length``-token segment's final tokens run at full depth."""
        return min(self.width, max(length, 0))

    def pruned(self, length: int) -> int:
        """How many of a ``length``-token segment's first tokens skip the block."""
        return max(length, 0) - self.deep(length)

    def pruned_share(self, length: int) -> float:
        """The share of a ``length``-token prompt whose tokens skip the block: the part of the skipped layers'
        FLOPs the rule saves (0 for an empty prompt)."""
        return self.pruned(length) / length if length > 0 else 0.0

    def order(self) -> tuple[int, str]:
        """The search's order of rules: fewer tokens at full depth first (faster, a larger drop expected); the
        name breaks ties."""
        return (self.width, self.name)
