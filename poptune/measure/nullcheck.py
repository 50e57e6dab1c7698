"""Null checks: pairs whose true speedup is known, timed to tell whether the machine could be trusted.

Two pairs do identical work on both sides, so their true ratio is 1: an A/A pair (the full model's prefill
against itself) and POP's decode against the full model's (POP changes prefill only; the decode path is the
untouched model). When either interval lies wholly outside ``1 +- tolerance`` the load on the machine moved
one side of the pairs and not the other: the run was too noisy to trust its speedups. A third check needs no
extra timing: a prefill speedup whose interval lies wholly above the FLOPs ideal is impossible for the
computation the ideal counts, so it too marks a perturbed measurement. A check needs at least
:data:`~poptune.measure.stats.MIN_BOOTSTRAP` pairs (fewer have no interval to judge by).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from poptune.measure.records import PairRecord
from poptune.measure.stats import MIN_BOOTSTRAP, excludes

__all__ = ["TOLERANCE", "NullCheck", "figures", "above_ideal", "noisy_reasons"]

#: How far from 1 an identical-work pair may be measured before the machine counts as too noisy.
TOLERANCE = 0.03


def figures(pair: PairRecord) -> dict[str, float | int]:
    """A pair's headline: its speedup, the interval's ends and its number of pairs."""
    lo, hi = pair.speedup_ci
    return {"speedup": pair.speedup, "lo": lo, "hi": hi, "pairs": pair.count}


def above_ideal(lo: float, ideal: float, tolerance: float = TOLERANCE) -> bool:
    """Whether a speedup is above the FLOPs ideal by more than its interval: its lower end above the ideal
    (with the identical-work ``tolerance``: the full model's ideal is 1, and its trial is then an A/A check)."""
    return lo > ideal * (1 + tolerance)


def noisy_reasons(label: str, lo: float, hi: float, tolerance: float = TOLERANCE) -> list[str]:
    """One reason when the identical-work interval ``[lo, hi]`` excludes ``1 +- tolerance``, else none."""
    if excludes((lo, hi), 1.0, tolerance):
        return [f"{label} measured [{lo:.3f}, {hi:.3f}], outside 1 +- {tolerance:.0%}"]
    return []


@dataclass
class NullCheck:
    """The null checks of one run: an A/A pair, the decode pairs, and prefill speedups above their ideal.

    Attributes:
        length: Prompt length of the A/A pair.
        aa: The A/A pair (full model against itself), or None when it was not timed.
        decode: Per prompt length, the figures of POP's decode against the full model's.
        above_ideal: Prompt lengths whose prefill speedup is above the ideal by more than its interval.
        tolerance: How far from 1 an identical-work interval may lie.
    """

    length: int
    aa: dict[str, float | int] | None
    decode: dict[int, dict[str, float | int]] = field(default_factory=dict)
    above_ideal: list[int] = field(default_factory=list)
    tolerance: float = TOLERANCE

    @property
    def reasons(self) -> list[str]:
        """Why the run was too noisy (empty: it was not)."""
        reasons = []
        if self.aa is not None and self.aa["pairs"] >= MIN_BOOTSTRAP:
            reasons += noisy_reasons(f"A/A prefill at {self.length}", self.aa["lo"], self.aa["hi"], self.tolerance)
        for length, fig in self.decode.items():
            if fig["pairs"] >= MIN_BOOTSTRAP:
                reasons += noisy_reasons(f"decode POP/full at {length}", fig["lo"], fig["hi"], self.tolerance)
        reasons += [f"prefill speedup at {n} above its FLOPs ideal by more than its interval" for n in self.above_ideal]
        return reasons

    @property
    def noisy(self) -> bool:
        """Whether any check failed."""
        return bool(self.reasons)

    def to_dict(self) -> dict[str, Any]:
        return {"length": self.length, "aa": self.aa, "decode": {str(k): v for k, v in self.decode.items()},
                "above_ideal": list(self.above_ideal), "tolerance": self.tolerance, "noisy": self.noisy,
                "reasons": self.reasons}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "NullCheck":
        return cls(length=int(data["length"]), aa=data.get("aa"),
                   decode={int(k): v for k, v in data.get("decode", {}).items()},
                   above_ideal=[int(n) for n in data.get("above_ideal", [])],
                   tolerance=float(data.get("tolerance", TOLERANCE)))
