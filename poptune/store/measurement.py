"""One configuration's measurement as a study stores it: every objective and sub-measurement.

The tuner builds a :class:`Measurement` from what it timed and scored and stores :meth:`Measurement.info` as a
trial's user attributes; :meth:`Measurement.from_info` reads it back (see :mod:`poptune.store.trials`, the
one reader of stored trials).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from poptune.engine import PopConfig
from poptune.errors import MeasurementError
from poptune.interval import Interval

__all__ = ["POP", "Measurement", "method_of", "weighted_ratio"]

#: The method of POP's own measurements (a baseline's carries its name).
POP = "pop"


def method_of(info: dict[str, Any]) -> str:
    """The method a stored measurement names; measurements stored without one are POP's."""
    return info.get("method", POP)


@dataclass
class Measurement:
    """Every objective and sub-measurement of one configuration, as a study stores it.

    Attributes:
        config: The configuration measured.
        method: ``pop`` or a baseline's name.
        latency: Per prompt length, :meth:`poptune.measure.bench.BenchRow.summary`: ``pop_ms``, ``full_ms``
            (p50), ``speedup`` (median of per-pair ratios, with its interval where measured), ``ideal``, and
            decode per-token latencies.
        target_length: The length whose POP prefill latency is the objective (a weighted workload: its
            longest timed length, for old readers).
        accuracy: Primary-metric accuracy per task on the items scored, in [0, 1].
        full_accuracy: The full model's on the same items.
        latency_weights: Per timed length, the share of the workload's prompts it stands for (empty: the
            objective is ``target_length`` alone).
        drop: The paired drop against the full model with its 95% interval and items
            (:class:`~poptune.evaluate.paired.PairedDrop` as a dict), where measured.
        reference_accuracy: The full model's mean accuracy on the study's reference items (the first racing
            round); the accuracy objective is this minus the drop, comparable across trials that scored
            different numbers of items.
        outcomes: Per task, the configuration's primary metric on each item scored, in the workload's order.
        energy_j: POP's joules per prefill at the target length (its NVML energy block), where measured;
            ``energy_reason`` says why not otherwise. Every length's figures, the full model's too, are in
            ``latency``.
        hardware: The hardware record; ``versions``: software versions.
        details: For a baseline: its ratio, removed layers, scores and calibration; for calibrated K/V
            (``kv_maps``): the maps' block, file, sha256 and how they were fitted.
        null_check: :meth:`poptune.measure.nullcheck.NullCheck.to_dict` of the measurement (decode POP/full
            pairs and the above-ideal check); ``provenance``: :func:`poptune.measure.provenance.provenance`.
    """

    config: PopConfig
    latency: dict[int, dict[str, float | None]]
    target_length: int
    accuracy: dict[str, float]
    full_accuracy: dict[str, float]
    method: str = "pop"
    energy_j: float | None = None
    energy_reason: str | None = None
    hardware: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    items: dict[str, int] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    latency_weights: dict[int, float] = field(default_factory=dict)
    drop: dict[str, Any] | None = None
    reference_accuracy: float | None = None
    outcomes: dict[str, list[float]] = field(default_factory=dict)
    null_check: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)

    @property
    def noisy(self) -> bool:
        """Whether a null check failed: the speedup is not to be ranked until measured again."""
        return bool(self.null_check.get("noisy"))

    def __post_init__(self) -> None:
        numbers = [v for row in self.latency.values() for v in row.values() if isinstance(v, (int, float))]
        numbers += list(self.accuracy.values()) + list(self.full_accuracy.values())
        bad = [v for v in numbers if not math.isfinite(v)]
        if bad:
            raise MeasurementError(f"measurement of {self.config} is not finite ({bad[:3]}): refusing to store it")

    def _weights(self) -> dict[int, float]:
        return self.latency_weights or {self.target_length: 1.0}

    def _weighted_ms(self, key: str) -> float:
        total = 0.0
        for n, w in self._weights().items():
            ms = self.latency[n][key]
            assert ms is not None, f"{key} at {n} tokens"  # every length timed holds both sides' medians
            total += w * float(ms)
        return total

    @property
    def prefill_ms(self) -> float:
        """POP's expected time to first token over the workload (p50 per length, weighted)."""
        return self._weighted_ms("pop_ms")

    @property
    def full_ms(self) -> float:
        """The full model's expected time to first token over the same prompts."""
        return self._weighted_ms("full_ms")

    @property
    def speedup(self) -> float:
        """The expected-TTFT speedup: per-length paired speedups combined with weights ``w * full_ms``."""
        return self._combine("speedup")

    @property
    def speedup_interval(self) -> Interval | None:
        """The speedup with its 95% interval from the per-length intervals (ends combined as if fully correlated:
        conservative), or None where a length has none."""
        try:
            return Interval(self.speedup, self._combine("speedup_lo"), self._combine("speedup_hi"))
        except (KeyError, TypeError):
            return None

    def _combine(self, key: str) -> float:
        return weighted_ratio(self.latency, self._weights(), key)

    @property
    def accuracy_mean(self) -> float:
        """Mean accuracy over tasks on the items scored (compare trials by :attr:`objective_accuracy`)."""
        return sum(self.accuracy.values()) / len(self.accuracy)

    @property
    def drop_points(self) -> float:
        """Mean accuracy drop against the full model in points (paired, where measured)."""
        if self.drop is not None:
            return float(self.drop["mean"])
        full = sum(self.full_accuracy[t] for t in self.accuracy) / len(self.accuracy)
        return 100 * (full - self.accuracy_mean)

    @property
    def drop_upper(self) -> float:
        """The drop's 95% upper bound (the drop itself where no interval was measured)."""
        return float(self.drop["hi"]) if self.drop is not None else self.drop_points

    @property
    def drop_lower(self) -> float:
        """The drop's 95% lower bound (the drop itself where no interval was measured)."""
        return float(self.drop["lo"]) if self.drop is not None else self.drop_points

    def candidate(self, max_drop: float) -> bool:
        """Worth certifying within ``max_drop`` points: not rejected (the drop's lower end within it) and the drop
        so far within it -- what a search can say of a configuration; only fresh items certify it
        (:mod:`poptune.tune.certify`)."""
        return self.drop_lower <= max_drop and self.drop_points <= max_drop

    @property
    def objective_accuracy(self) -> float:
        """The accuracy objective: the reference accuracy minus the paired drop (else the plain mean)."""
        if self.reference_accuracy is None or self.drop is None:
            return self.accuracy_mean
        return self.reference_accuracy - self.drop_points / 100

    def objectives(self) -> tuple[float, float]:
        """``(expected prefill ms, accuracy)``: minimise, maximise."""
        return self.prefill_ms, self.objective_accuracy

    def info(self) -> dict[str, Any]:
        """Everything, JSON-serialisable (Gymnasium ``info``, Optuna user attributes)."""
        interval = self.speedup_interval
        return {
            "method": self.method,
            "config": self.config.to_dict(),
            "target_length": self.target_length,
            "prefill_ms": self.prefill_ms,
            "full_ms": self.full_ms,
            "speedup": self.speedup,
            "speedup_ci": list(interval.ends()) if interval else None,
            "ideal": self._combine("ideal"),
            "pairs": min(int(row.get("pairs") or 0) for row in self.latency.values()) or None,
            "latency": {str(k): v for k, v in self.latency.items()},
            "latency_weights": {str(k): v for k, v in self.latency_weights.items()},
            "accuracy": self.accuracy,
            "accuracy_mean": self.accuracy_mean,
            "objective_accuracy": self.objective_accuracy,
            "reference_accuracy": self.reference_accuracy,
            "full_accuracy": self.full_accuracy,
            "drop_points": self.drop_points,
            "drop": self.drop,
            "outcomes": {t: [round(v, 4) for v in vs] for t, vs in self.outcomes.items()},
            "energy_j": self.energy_j,
            "energy_reason": self.energy_reason,
            "items": self.items,
            "hardware": self.hardware,
            "versions": self.versions,
            "details": self.details,
            "null_check": self.null_check,
            "noisy": self.noisy,
            "provenance": self.provenance,
        }

    @classmethod
    def from_info(cls, info: dict[str, Any]) -> "Measurement":
        return cls(
            config=PopConfig.from_dict(info["config"]),
            latency={int(k): v for k, v in info["latency"].items()},
            target_length=int(info["target_length"]),
            accuracy=dict(info["accuracy"]),
            full_accuracy=dict(info["full_accuracy"]),
            method=method_of(info),
            energy_j=info.get("energy_j"),
            energy_reason=info.get("energy_reason"),
            hardware=info.get("hardware", {}),
            versions=info.get("versions", {}),
            items=info.get("items", {}),
            details=info.get("details", {}),
            latency_weights={int(k): float(v) for k, v in (info.get("latency_weights") or {}).items()},
            drop=info.get("drop"),
            reference_accuracy=info.get("reference_accuracy"),
            outcomes=info.get("outcomes") or {},
            null_check=info.get("null_check", {}),
            provenance=info.get("provenance", {}),
        )


def weighted_ratio(latency: dict[int, dict[str, Any]], weights: dict[int, float], key: str = "speedup") -> float:
    """The expected-TTFT ratio over prompt lengths from per-length ratios ``latency[n][key]``.

    ``sum(w f) / sum(w f / r)``: the harmonic mean of the per-length ratios r, weighted by each length's share
    w of the prompts times its full-model latency f (what that length contributes to the expected time).
    """
    shares = {n: w * float(latency[n]["full_ms"]) for n, w in weights.items()}
    total = sum(shares.values())
    return total / sum(a / float(latency[n][key]) for n, a in shares.items())
