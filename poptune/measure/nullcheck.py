"""Null checks: pairs whose true speedup is known, timed to tell whether the machine could be trusted.

Two pairs do identical work on both sides, so their true ratio is 1: an A/A pair (the full model's prefill
against itself) and POP's decode against the full model's (POP changes prefill only; the decode path is the
untouched model).

The A/A pair must *show* that the machine measures identical work as identical: an equivalence test, two
one-sided tests (TOST) of the median per-pair ratio against the margin ``1 +- 5%`` (``[1/1.05, 1.05]``, i.e.
``+-ln 1.05`` on the log ratios), each a sign test at level 0.05. Distribution-free: equivalence is shown when
the order-statistic interval of the median at 90% (:func:`poptune.measure.stats.median_ci`, coverage >= 0.90)
lies strictly inside the margin; otherwise the run is flagged as noisy. It takes :data:`AA_PAIRS` = 16 pairs
(the interval is ``[x_(5), x_(12)]``, coverage 0.923, each one-sided test at level 0.038), about 10 s at 512
tokens on a 2-core CPU (0.6 s a pair). By a seeded simulation (``tests/measure/test_intervals.py``, 4,000
replicates of 16 normal log ratios a case) it passes a machine without bias with probability 1.000 / 0.997 /
0.946 at a per-pair log-ratio spread of 2% / 3% / 4% sd (0.9995 with heavy-tailed t3 noise of 3% sd; this CPU's
spread is about 3%: 2.6-3.6% from the median and mean ranges of the Gemma-3-270M grid's 482 prefill
measurements of 3 pairs, with a heavy tail), and flags a true 5% bias either way with probability 0.957-0.967
(its size, 0.038 a side by the binomial, bounds the passes at the margin), a true 8% bias always; a 3% bias,
inside the margin, passes 59% of the time at 3% sd. Records made before this test (no ``equivalent`` key) are
judged as they were: flagged only when the interval excludes ``1 +- tolerance``.

The decode pairs are as many as the bench's policy gives (6 and up by default), too few for an equivalence test of
useful power: they flag only a difference, an interval wholly outside ``1 +- tolerance`` (3%). A third check
needs no extra timing: a prefill speedup whose interval lies wholly above the FLOPs ideal is impossible for
the computation the ideal counts, so it too marks a perturbed measurement. A check needs at least
:data:`~poptune.measure.stats.MIN_JUDGED` pairs (fewer have no interval to judge by).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from poptune.errors import ConfigError
from poptune.interval import Interval
from poptune.measure.records import PairRecord
from poptune.measure.stats import MIN_JUDGED, median_ci

if TYPE_CHECKING:
    from poptune.measure.timer import RepeatPolicy

__all__ = ["AA_ALPHA", "AA_MARGIN", "AA_PAIRS", "TOLERANCE", "Equivalence", "NullCheck", "aa_figures", "aa_policy",
           "aa_reasons", "above_ideal", "equivalence", "figures", "noisy_reasons"]

#: How far from 1 an identical-work interval may lie (decode pairs, and A/A records made before the
#: equivalence test) before the machine counts as too noisy.
TOLERANCE = 0.03

#: The A/A equivalence margin: the median ratio must be shown within ``[1/(1+AA_MARGIN), 1+AA_MARGIN]``.
AA_MARGIN = 0.05

#: Level of each one-sided test of the A/A equivalence test (its interval is at ``1 - 2 * AA_ALPHA``).
AA_ALPHA = 0.05

#: A/A pairs per check: power >= 0.95 to pass a quiet machine up to a 4% per-pair spread (module docstring).
AA_PAIRS = 16


@dataclass(frozen=True)
class Equivalence:
    """A distribution-free TOST of identical work: the median ratio's ``1 - 2 * alpha`` interval against the margin.

    Attributes:
        speedup: Median per-pair ratio with its order-statistic interval at ``1 - 2 * alpha`` and that interval's
            actual coverage (under ``1 - 2 * alpha`` with too few pairs: never equivalent).
        pairs: Number of pairs.
        margin: Equivalence within ``[1/(1+margin), 1+margin]``.
        alpha: Level of each one-sided test.
    """

    speedup: Interval
    pairs: int
    margin: float = AA_MARGIN
    alpha: float = AA_ALPHA

    @property
    def bounds(self) -> tuple[float, float]:
        """The margin as ratios: ``(1/(1+margin), 1+margin)``."""
        return 1.0 / (1.0 + self.margin), 1.0 + self.margin

    @property
    def equivalent(self) -> bool:
        """Whether both one-sided tests reject: the interval strictly inside :attr:`bounds`, at its level."""
        lo, hi = self.bounds
        return self.speedup.meets and self.speedup.above(lo) and self.speedup.below(hi)

    def figures(self) -> dict[str, Any]:
        """The headline as a null check stores it (``lo``/``hi``: the test's interval, at ``confidence``)."""
        return {"speedup": self.speedup.point, "lo": self.speedup.lo, "hi": self.speedup.hi, "pairs": self.pairs,
                "confidence": self.speedup.level, "coverage": self.speedup.coverage, "margin": self.margin,
                "test": "tost-sign", "equivalent": self.equivalent}


def equivalence(ratios: Sequence[float], *, margin: float = AA_MARGIN, alpha: float = AA_ALPHA) -> Equivalence:
    """The TOST of ``ratios`` (identical work: true median 1) against ``1 +- margin`` at level ``alpha`` a side.

    Example: 16 ratios within 0.98..1.02 are equivalent; 16 around 1.06, or 16 spread over 0.85..1.15, are not.

    Raises:
        ConfigError: no ratios, ``margin`` not > 0, or ``alpha`` outside (0, 0.5).
    """
    if not math.isfinite(margin) or margin <= 0:
        raise ConfigError(f"`margin` must be > 0, got {margin}")
    if not 0.0 < alpha < 0.5:
        raise ConfigError(f"`alpha` must be in (0, 0.5), got {alpha}")
    return Equivalence(speedup=median_ci(ratios, 1.0 - 2.0 * alpha), pairs=len(ratios), margin=margin, alpha=alpha)


def aa_policy(policy: "RepeatPolicy") -> "RepeatPolicy":
    """The repeat policy of an A/A pair timed beside ``policy``'s rows: at least :data:`AA_PAIRS` pairs and no
    precision stop (the equivalence test's power needs its pairs)."""
    from dataclasses import replace

    return replace(policy, min_repeats=max(AA_PAIRS, policy.min_repeats), precision=None,
                   max_repeats=max(AA_PAIRS, policy.max_repeats))


def aa_figures(pair: PairRecord, *, margin: float = AA_MARGIN, alpha: float = AA_ALPHA) -> dict[str, Any]:
    """An A/A pair's headline with its equivalence test (:meth:`Equivalence.figures`)."""
    return equivalence(pair.ratios, margin=margin, alpha=alpha).figures()


def aa_reasons(label: str, fig: Mapping[str, Any], tolerance: float = TOLERANCE) -> list[str]:
    """One reason when the A/A figures ``fig`` do not show equivalence, else none (a record made before the
    equivalence test: when its interval excludes ``1 +- tolerance``)."""
    if "equivalent" not in fig:
        return noisy_reasons(label, fig["lo"], fig["hi"], tolerance)
    if fig["equivalent"]:
        return []
    margin = float(fig["margin"])
    return [f"{label} measured {fig['speedup']:.3f} [{fig['lo']:.3f}, {fig['hi']:.3f}] ({fig['confidence']:.0%} "
            f"interval of {fig['pairs']} pairs), not shown within 1 +- {margin:.0%} "
            f"([{1 / (1 + margin):.3f}, {1 + margin:.3f}])"]


def figures(pair: PairRecord) -> dict[str, float | int]:
    """A pair's headline: its speedup, the interval's ends, its number of pairs and the interval's coverage."""
    ci = pair.speedup_ci
    return {"speedup": pair.speedup, "lo": ci.lo, "hi": ci.hi, "pairs": pair.count, "coverage": pair.speedup_coverage}


def above_ideal(lo: float, ideal: float, tolerance: float = TOLERANCE) -> bool:
    """Whether a speedup is above the FLOPs ideal by more than its interval: its lower end above the ideal
    (with the identical-work ``tolerance``: the full model's ideal is 1, and its trial is then an A/A check)."""
    return lo > ideal * (1 + tolerance)


def noisy_reasons(label: str, lo: float, hi: float, tolerance: float = TOLERANCE) -> list[str]:
    """One reason when the identical-work interval ``[lo, hi]`` excludes ``1 +- tolerance``, else none."""
    if Interval(1.0, lo, hi).excludes(1.0, tolerance):
        return [f"{label} measured [{lo:.3f}, {hi:.3f}], outside 1 +- {tolerance:.0%}"]
    return []


@dataclass
class NullCheck:
    """The null checks of one run: an A/A pair, the decode pairs, and prefill speedups above their ideal.

    Attributes:
        length: Prompt length of the A/A pair.
        aa: The A/A pair's figures with its equivalence test (:func:`aa_figures`; older records:
            :func:`figures`), or None when it was not timed.
        decode: Per prompt length, the figures of POP's decode against the full model's.
        above_ideal: Prompt lengths whose prefill speedup is above the ideal by more than its interval.
        tolerance: How far from 1 a decode interval (or an A/A interval of an older record) may lie.
    """

    length: int
    aa: dict[str, Any] | None
    decode: dict[int, dict[str, float | int]] = field(default_factory=dict)
    above_ideal: list[int] = field(default_factory=list)
    tolerance: float = TOLERANCE

    @property
    def reasons(self) -> list[str]:
        """Why the run was too noisy (empty: it was not)."""
        reasons = []
        if self.aa is not None and self.aa["pairs"] >= MIN_JUDGED:
            reasons += aa_reasons(f"A/A prefill at {self.length}", self.aa, self.tolerance)
        for length, fig in self.decode.items():
            if fig["pairs"] >= MIN_JUDGED:
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
