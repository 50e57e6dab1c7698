"""A tuning problem: model x task suite x prompt lengths (the hardware is where it runs), and its reward."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from poptune.engine import BOUNDARIES, PopConfig
from poptune.errors import ConfigError, MeasurementError
from poptune.tune.presets import STANDARD

if TYPE_CHECKING:
    from poptune.evaluate.racing import RacingPolicy

__all__ = ["TuningProblem", "Measurement", "MAX_OFFSET", "config_from_action", "reward", "weighted_ratio"]

#: The search space's largest offset (final layers kept in prefill).
MAX_OFFSET = 2

#: Reward lost per accuracy point beyond the budget (see :func:`reward`).
PENALTY_PER_POINT = 0.5


@dataclass(frozen=True)
class TuningProblem:
    """What one environment (and one study) measures.

    Attributes:
        model: poptune model name.
        tasks: Accuracy tasks (real lm-eval tasks and/or ``passkey``/``kv_recall``).
        lengths: Prompt lengths of the synthetic tasks' passkey items (the latency objective is timed at the
            lengths of the prompts the workload scores, see :meth:`poptune.evaluate.workload.Workload.latency_points`);
            of an image problem or with ``latency_points=0``, the lengths timed (``target_length``, default the
            first, is the objective).
        limit: Items per task at most (the racing cap); ``items_start`` in the first round.
        data_dir: Where the real task files are.
        max_drop: Accuracy budget in points for the reward and the study's constraint (None: no budget).
        device, dtype, weights: As :func:`poptune.load_model`.
        batch_size: Prompts per timed forward.
        repeats: Least POP/full pairs per latency measurement.
        precision: Pairs continue until the speedup's 95% interval is +- this fraction of it (None: stop at
            ``repeats``), within ``max_pairs`` pairs and ``max_seconds`` per measurement. The defaults keep a
            Gemma-3-270M trial's latency at 512 tokens near 10-20 s on a 2-core CPU.
        decode_tokens: New tokens per decode-latency measurement (0: none).
        seed: Seed of synthetic tasks.
        image: ``"WIDTHxHEIGHT"`` for a vision-language model: the timed prompt is then one image of that size
            and a short question (its token count is the target length) instead of text of ``lengths``.
            Accuracy is still measured on ``tasks``.
        items_start: Items per task in the first racing round (:mod:`poptune.evaluate.racing`).
        halfwidth: Without ``max_drop``, racing stops once the drop's 95% interval is this narrow (points).
        latency_points: Prompt lengths of the workload timed per trial (quantile groups of its prompts); 0 times
            ``lengths`` instead.
    """

    model: str = "gemma-3"
    tasks: tuple[str, ...] = ("passkey", "kv_recall")
    lengths: tuple[int, ...] = (512,)
    target_length: int | None = None
    limit: int | None = STANDARD.limit
    data_dir: str | None = None
    max_drop: float | None = None
    device: str = "cpu"
    dtype: str | None = None
    weights: str = "pretrained"
    batch_size: int = 1
    repeats: int = 3
    precision: float | None = 0.02
    max_pairs: int = STANDARD.max_pairs
    max_seconds: float = STANDARD.max_seconds
    decode_tokens: int = 4
    seed: int = 0
    eval_batch_size: int = 8
    image: str | None = None
    items_start: int = STANDARD.items
    halfwidth: float = 2.0
    latency_points: int = 2

    def __post_init__(self) -> None:
        if self.image is not None:
            from poptune.models.vision import ImageSize

            ImageSize.parse(self.image)
        if not self.tasks:
            raise ConfigError("a tuning problem needs at least one task")
        if not self.lengths or any(not isinstance(n, int) or n < 2 for n in self.lengths):
            raise ConfigError(f"prompt lengths must be integers >= 2, got {list(self.lengths)}")
        if self.target_length is not None and self.target_length not in self.lengths:
            raise ConfigError(f"`target_length` {self.target_length} must be one of the lengths {list(self.lengths)}")
        if self.max_drop is not None and (not math.isfinite(self.max_drop) or self.max_drop < 0):
            raise ConfigError(f"`max_drop` must be >= 0 accuracy points, got {self.max_drop}")
        if self.limit is not None and self.limit < 1:
            raise ConfigError(f"`limit` must be a positive integer, got {self.limit}")
        if self.latency_points < 0:
            raise ConfigError(f"`latency_points` must be >= 0, got {self.latency_points}")
        self.racing()  # validates items_start, limit and halfwidth
        if self.repeats < 1:
            raise ConfigError(f"`repeats` must be >= 1, got {self.repeats}")
        if self.max_pairs < self.repeats:
            raise ConfigError(f"`max_pairs` must be >= `repeats` ({self.repeats}), got {self.max_pairs}")
        if self.precision is not None and not 0 < self.precision < 1:
            raise ConfigError(f"`precision` must be in (0, 1), got {self.precision}")
        if not self.max_seconds > 0:
            raise ConfigError(f"`max_seconds` must be > 0, got {self.max_seconds}")

    @property
    def target(self) -> int:
        """The text prompt length of the latency objective (an image problem's is known once it is built)."""
        return self.target_length if self.target_length is not None else self.lengths[0]

    @property
    def target_label(self) -> str:
        """What the latency objective times: ``512`` (tokens) or ``image-640x480``."""
        return f"image-{self.image}" if self.image is not None else str(self.target)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TuningProblem":
        data = dict(data)
        for key in ("tasks", "lengths"):
            data[key] = tuple(data[key])
        return cls(**data)

    def data_path(self) -> Path | None:
        return Path(self.data_dir) if self.data_dir else None

    def racing(self) -> "RacingPolicy":
        """How many items a trial's accuracy may take."""
        from poptune.evaluate.racing import RacingPolicy

        cap = self.limit if self.limit is not None else 1_000_000
        return RacingPolicy(start=min(self.items_start, cap), cap=cap, target_halfwidth=self.halfwidth)

    @property
    def synthetic_lengths(self) -> tuple[int, ...]:
        """Prompt lengths of synthetic passkey items: ``lengths`` (an image problem's lengths time nothing)."""
        return self.lengths if self.image is None else (256,)

    @property
    def weighted(self) -> bool:
        """Whether latency is timed at the workload's prompt lengths (not ``lengths``)."""
        return self.latency_points > 0 and self.image is None


def config_from_action(action: dict[str, Any], num_layers: int) -> PopConfig:
    """A POP configuration from an action ``{"skip", "boundary", "offset"}``.

    ``boundary`` may be an index into :data:`~poptune.engine.BOUNDARIES` or its name. ``skip`` is clipped so
    that ``skip + offset <= L - 1``, and ``skip=0`` is always the plain full model (several actions then name
    one configuration; it is measured once).
    """
    try:
        skip, offset, boundary = int(action["skip"]), int(action["offset"]), action["boundary"]
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"an action needs integer `skip`, `offset` and a `boundary`, got {action!r}") from e
    if not isinstance(boundary, str):
        index = int(boundary)
        if not 0 <= index < len(BOUNDARIES):
            raise ConfigError(f"`boundary` index must be in [0, {len(BOUNDARIES) - 1}], got {index}")
        boundary = BOUNDARIES[index]
    if not 0 <= offset <= MAX_OFFSET:
        raise ConfigError(f"`offset` must be in [0, {MAX_OFFSET}], got {offset}")
    if not 0 <= skip <= num_layers - 1:
        raise ConfigError(f"`skip` must be in [0, {num_layers - 1}] for this model, got {skip}")
    skip = min(skip, num_layers - 1 - offset)
    if skip == 0:
        return PopConfig(skip=0)  # nothing skipped: boundary and offset change nothing, one full model
    return PopConfig(skip=skip, boundary=boundary, offset=offset)


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
        details: For a baseline: its ratio, removed layers, scores and calibration.
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

    @property
    def prefill_ms(self) -> float:
        """POP's expected time to first token over the workload (p50 per length, weighted)."""
        return sum(w * float(self.latency[n]["pop_ms"]) for n, w in self._weights().items())  # type: ignore[arg-type]

    @property
    def full_ms(self) -> float:
        """The full model's expected time to first token over the same prompts."""
        return sum(w * float(self.latency[n]["full_ms"]) for n, w in self._weights().items())  # type: ignore[arg-type]

    @property
    def speedup(self) -> float:
        """The expected-TTFT speedup: per-length paired speedups combined with weights ``w * full_ms``."""
        return self._combine("speedup")

    @property
    def speedup_interval(self) -> tuple[float, float] | None:
        """The speedup's 95% interval from the per-length intervals (ends combined as if fully correlated:
        conservative), or None where a length has none."""
        try:
            return self._combine("speedup_lo"), self._combine("speedup_hi")
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
            "speedup_ci": list(interval) if interval else None,
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
            method=info.get("method", "pop"),
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


def reward(measurement: Measurement, max_drop: float | None) -> float:
    """The scalar reward: prefill speedup, minus 0.5 per accuracy point beyond the budget.

    ``reward = speedup - 0.5 * max(0, drop_points - max_drop)`` (no penalty without a budget). A configuration
    within budget is rewarded by its speedup alone; one beyond it loses half a unit of speedup per point.
    """
    excess = 0.0 if max_drop is None else max(0.0, measurement.drop_points - max_drop)
    return measurement.speedup - PENALTY_PER_POINT * excess
