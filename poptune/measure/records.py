"""Latency records: raw latencies of one callable, and of two timed as pairs, with their speedup interval
(the order-statistic interval of the median ratio, :mod:`poptune.measure.stats`, with its actual coverage)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from poptune.errors import ConfigError
from poptune.interval import Interval
from poptune.measure.stats import median_ci, percentile

__all__ = ["ORDERS", "LatencyRecord", "PairRecord", "percentile"]


@dataclass
class LatencyRecord:
    """Raw latencies of repeated calls, in milliseconds, with summary statistics.

    Attributes:
        values_ms: One latency per measured call, in call order (warm-up calls excluded).
    """

    values_ms: list[float]

    def __post_init__(self) -> None:
        if len(self.values_ms) == 0:
            raise ConfigError("`values_ms` must hold at least one value, got none")
        self.values_ms = [float(v) for v in self.values_ms]

    @property
    def count(self) -> int:
        """Number of measured calls."""
        return len(self.values_ms)

    @property
    def p50(self) -> float:
        """Median latency (ms)."""
        return percentile(self.values_ms, 50)

    @property
    def p90(self) -> float:
        """90th-percentile latency (ms)."""
        return percentile(self.values_ms, 90)

    @property
    def mean(self) -> float:
        """Arithmetic mean latency (ms)."""
        return math.fsum(self.values_ms) / self.count

    @property
    def std(self) -> float:
        """Population standard deviation (ddof=0, like ``numpy.std``) in ms; 0.0 for a single value."""
        mu = self.mean
        return math.sqrt(math.fsum((v - mu) ** 2 for v in self.values_ms) / self.count)

    def to_dict(self) -> dict[str, Any]:
        """Returns the raw values plus the derived statistics (which :meth:`from_dict` recomputes)."""
        return {
            "unit": "ms",
            "values_ms": list(self.values_ms),
            "count": self.count,
            "p50": self.p50,
            "p90": self.p90,
            "mean": self.mean,
            "std": self.std,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LatencyRecord:
        """Rebuilds a record from :meth:`to_dict` output; only ``values_ms`` is read."""
        if data.get("unit", "ms") != "ms":
            raise ConfigError(f"`unit` must be 'ms', got {data['unit']!r}")
        if "values_ms" not in data:
            raise ConfigError("a latency record needs `values_ms`")
        return cls(values_ms=list(data["values_ms"]))

    def to_json(self, indent: int | None = None) -> str:
        """Serialises :meth:`to_dict` to JSON."""
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str) -> LatencyRecord:
        """Parses :meth:`to_json` output."""
        return cls.from_dict(json.loads(text))


#: Pair orders of :class:`RepeatPolicy`: A-B then B-A in turn, blocks of both in a seeded random order, or A
#: first always.
ORDERS = ("alternate", "random", "fixed")


@dataclass
class PairRecord:
    """Latencies of two callables timed interleaved, one pair after the other, in one process.

    ``ratios[i] = b.values_ms[i] / a.values_ms[i]`` for pair ``i``, so a ratio above 1 means A was faster.
    Intended use: ``a`` = the POP configuration, ``b`` = the full model, so :attr:`speedup` is POP's speedup.

    Attributes:
        a: Latencies of A, one per pair (in pair order, whichever member ran first).
        b: Latencies of B, one per pair.
        order: Per pair, which ran first: ``"ab"`` or ``"ba"`` (empty for records made before it was kept).
        offsets_s: Per pair, its start in seconds after the timed loop started.
        started: Wall-clock start of the timed loop (Unix seconds), or None.
        confidence: Level of :attr:`speedup_ci` (asked for; :attr:`speedup_coverage` is what it has).
        seed: Seed the record was made with (its random pair order; the interval itself is exact).
    """

    a: LatencyRecord
    b: LatencyRecord
    order: list[str] = field(default_factory=list)
    offsets_s: list[float] = field(default_factory=list)
    started: float | None = None
    confidence: float = 0.95
    seed: int = 0

    def __post_init__(self) -> None:
        if self.a.count != self.b.count:
            raise ConfigError(f"`a` and `b` must hold as many values, got {self.a.count} and {self.b.count}")
        if min(self.a.values_ms) <= 0.0:
            raise ConfigError(f"`a` latencies must be > 0 to form ratios, got {min(self.a.values_ms)}")
        for name in ("order", "offsets_s"):
            kept = getattr(self, name)
            if kept and len(kept) != self.a.count:
                raise ConfigError(f"`{name}` must hold one entry per pair ({self.a.count}), got {len(kept)}")
        bad = [o for o in self.order if o not in ("ab", "ba")]
        if bad:
            raise ConfigError(f"`order` entries must be 'ab' or 'ba', got {bad[:3]}")

    @property
    def count(self) -> int:
        """Number of pairs."""
        return self.a.count

    @property
    def ratios(self) -> list[float]:
        """Per-pair ``b / a`` (> 1 means A is faster)."""
        return [b / a for a, b in zip(self.a.values_ms, self.b.values_ms)]

    @property
    def speedup(self) -> float:
        """Median of the per-pair ratios: robust to a slow outlier in either member of one pair."""
        return percentile(self.ratios, 50)

    @property
    def speedup_ci(self) -> Interval:
        """:attr:`speedup` with its :attr:`confidence` interval: two order statistics of the ratios (see
        :func:`poptune.measure.stats.median_ci`; the ratios' range under 6 pairs at 95%) and its exact coverage."""
        return median_ci(self.ratios, self.confidence)

    @property
    def speedup_coverage(self) -> float:
        """The actual coverage of :attr:`speedup_ci` (below :attr:`confidence` with too few pairs)."""
        coverage = self.speedup_ci.coverage
        assert coverage is not None  # median_ci always states it
        return coverage

    @property
    def half_width(self) -> float:
        """Half the interval's width relative to the speedup (0.02 = +-2%)."""
        return self.speedup_ci.relative_half_width()

    def to_dict(self) -> dict[str, Any]:
        """Returns both records, the pair order and times, plus the derived ratios, speedup, interval and its
        coverage."""
        ci = self.speedup_ci
        return {"a": self.a.to_dict(), "b": self.b.to_dict(), "order": list(self.order),
                "offsets_s": list(self.offsets_s), "started": self.started, "ratios": self.ratios,
                "speedup": self.speedup, "speedup_lo": ci.lo, "speedup_hi": ci.hi, "pairs": self.count,
                "confidence": self.confidence, "coverage": self.speedup_coverage, "seed": self.seed}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PairRecord:
        """Rebuilds a record from :meth:`to_dict` output; the derived figures are recomputed."""
        if "a" not in data or "b" not in data:
            raise ConfigError("a pair record needs `a` and `b`")
        return cls(a=LatencyRecord.from_dict(data["a"]), b=LatencyRecord.from_dict(data["b"]),
                   order=list(data.get("order", [])), offsets_s=list(data.get("offsets_s", [])),
                   started=data.get("started"), confidence=float(data.get("confidence", 0.95)),
                   seed=int(data.get("seed", 0)))

    def to_json(self, indent: int | None = None) -> str:
        """Serialises :meth:`to_dict` to JSON."""
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str) -> PairRecord:
        """Parses :meth:`to_json` output."""
        return cls.from_dict(json.loads(text))
