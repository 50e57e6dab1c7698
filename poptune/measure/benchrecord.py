"""What ``poptune bench`` is asked for and what it records: the spec, one row per prompt, the whole result.

A row holds the prefill pair (POP as A, the full model as B), the FLOPs ideal, the decode pair, and what the
GPU did meanwhile: NVML telemetry sampled through the row (:class:`~poptune.measure.telemetry.Sampler`), the
joules per prefill of each side from its own energy block (:mod:`poptune.measure.energy`), and how the
prefill was timed (eagerly or as a CUDA graph, :mod:`poptune.measure.graphs`). Every record round-trips
through JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from poptune.engine import PopConfig
from poptune.engine.segments import chunk_bounds
from poptune.errors import ConfigError
from poptune.measure.energy import MIN_BLOCK_SECONDS, check_block_seconds
from poptune.measure.hardware import HardwareRecord
from poptune.measure.nullcheck import NullCheck, above_ideal
from poptune.measure.records import PairRecord
from poptune.measure.stats import MIN_JUDGED, MIN_PAIRS_95
from poptune.measure.timer import RepeatPolicy
from poptune.models.vision import ImageSize

__all__ = ["DEFAULT_POLICY", "GPU_WARMUP_SECONDS", "BenchSpec", "BenchRow", "BenchResult", "device_policy"]


def _joules(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g} J"

#: ``poptune bench``'s rule: at least 6 pairs (the fewest whose 95% interval reaches 95%) and 1 s, then on until
#: the interval is +-2% (60 pairs, 20 s at most).
DEFAULT_POLICY = RepeatPolicy(warmup=1, min_repeats=MIN_PAIRS_95, min_seconds=1.0, max_repeats=60, precision=0.02,
                              max_seconds=20.0)


#: The least warm-up on a GPU, at the timed shape, before its pairs: its clocks ramp up from idle meanwhile.
GPU_WARMUP_SECONDS = 1.0


def device_policy(policy: RepeatPolicy, device: torch.device) -> RepeatPolicy:
    """``policy`` as timed on ``device``: on CUDA its warm-up lasts at least :data:`GPU_WARMUP_SECONDS` (and at
    least one pair), so the first timed pairs do not run at idle clocks; elsewhere unchanged."""
    if device.type != "cuda" or (policy.warmup_seconds >= GPU_WARMUP_SECONDS and policy.warmup >= 1):
        return policy
    return replace(policy, warmup=max(policy.warmup, 1), warmup_seconds=max(policy.warmup_seconds, GPU_WARMUP_SECONDS))


@dataclass(frozen=True)
class BenchSpec:
    """What to time.

    Attributes:
        lengths: Prompt lengths in tokens (text prompts).
        batch_size: Prompts per forward.
        decode_tokens: New tokens per decode measurement (0 = prefill only); latency is per token.
        policy: Repeats per measurement (each repeat is one POP/full pair) and when to stop.
        null_check: Also time A/A pairs (full against full) at the first length, at least 16, for their
            equivalence test (see :mod:`poptune.measure.nullcheck`).
        images: Image resolutions; when given, each row is a prompt of one image of that size and a short
            question (a vision-language model only) and ``lengths`` are not timed.
        graphs: Time each side's prefill as a replayed CUDA graph (CUDA only; see
            :mod:`poptune.measure.graphs` for where it applies).
        energy_seconds: Length of each energy block (0: none; else at least 1 s): per row, three blocks per side,
            alternated, and once per run an idle block (see :mod:`poptune.measure.energy`); without NVML no
            block runs and the row says why.
        prefill_chunk: Prefill in chunks of this many tokens, POP and the full model alike (None: whole
            prompts; text prompts only), see :mod:`poptune.engine.segments`.
    """

    lengths: tuple[int, ...] = (128, 512, 2048)
    batch_size: int = 1
    decode_tokens: int = 16
    policy: RepeatPolicy = field(default_factory=lambda: DEFAULT_POLICY)
    images: tuple[ImageSize, ...] = ()
    null_check: bool = True
    graphs: bool = False
    energy_seconds: float = MIN_BLOCK_SECONDS
    prefill_chunk: int | None = None

    def __post_init__(self) -> None:
        check_block_seconds(self.energy_seconds)
        if not isinstance(self.graphs, bool):
            raise ConfigError(f"`graphs` must be True or False, got {self.graphs!r}")
        if any(not isinstance(size, ImageSize) for size in self.images):
            raise ConfigError(f"`images` must be ImageSize values, got {list(self.images)}")
        if not self.lengths:
            raise ConfigError("`lengths` must name at least one prompt length")
        bad = [n for n in self.lengths if isinstance(n, bool) or not isinstance(n, int) or n < 2]
        if bad:
            raise ConfigError(f"prompt lengths must be integers >= 2, got {bad}")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ConfigError(f"`batch_size` must be an integer >= 1, got {self.batch_size!r}")
        if not isinstance(self.decode_tokens, int) or self.decode_tokens < 0:
            raise ConfigError(f"`decode_tokens` must be an integer >= 0, got {self.decode_tokens!r}")
        chunk_bounds(2, self.prefill_chunk)  # validates it
        if self.prefill_chunk is not None and self.images:
            raise ConfigError("`prefill_chunk` applies to text prompts only: image prompts are prefilled whole")


@dataclass
class BenchRow:
    """One prompt: prefill pair, ideal ratio, and (optionally) decode per-token latency pair.

    ``length`` is the prompt's length in tokens; an image prompt also records its ``image`` size and how many
    of those tokens are ``image_tokens``. ``telemetry`` is the row's :meth:`Sampler.summary
    <poptune.measure.telemetry.Sampler.summary>`; ``energy`` holds each side's
    :class:`~poptune.measure.energy.EnergyReading` as a dict (``pop``, ``full``); ``timing`` says how the
    prefill was timed (``mode``: ``eager`` or ``cuda-graph``, and ``reason`` where graphs were asked for but
    did not apply). ``kv_bytes`` and ``full_kv_bytes``: the bytes of each side's K/V cache after its prefill, per
    request (:func:`poptune.measure.prefill.cache_bytes`; None in a record made before them).
    """

    length: int
    prefill: PairRecord  # a = POP, b = full model
    ideal: float
    decode: PairRecord | None = None
    image: str | None = None
    image_tokens: int | None = None
    telemetry: dict[str, Any] | None = None
    energy: dict[str, dict[str, Any]] | None = None
    timing: dict[str, Any] | None = None
    kv_bytes: int | None = None
    full_kv_bytes: int | None = None

    @property
    def speedup(self) -> float:
        return self.prefill.speedup

    @property
    def above_ideal(self) -> bool:
        """Whether the prefill speedup is above the FLOPs ideal by more than its interval (from 3 pairs on)."""
        return self.prefill.count >= MIN_JUDGED and above_ideal(self.prefill.speedup_ci.lo, self.ideal)

    def energy_figures(self) -> dict[str, Any]:
        """Joules per prefill of each side (``energy_pop_j``, ``energy_full_j``: the median of its blocks, with
        ``_lo``/``_hi``), the net figures beside them (less the idle power, ``energy_pop_net_j``,
        ``energy_full_net_j``) and that idle power (``idle_w``); None with ``energy_reason`` where not measured."""
        sides = self.energy or {}
        pop, full = sides.get("pop") or {}, sides.get("full") or {}
        reasons = sorted({r for r in (pop.get("reason"), full.get("reason")) if r})
        if not sides:
            reasons = ["not measured (a record made before energy blocks)"]
        figures: dict[str, Any] = {}
        for name, side in (("pop", pop), ("full", full)):
            figures |= {f"energy_{name}_j": side.get("j_per_call"), f"energy_{name}_j_lo": side.get("j_per_call_lo"),
                        f"energy_{name}_j_hi": side.get("j_per_call_hi"),
                        f"energy_{name}_net_j": side.get("net_j_per_call")}
        return figures | {"idle_w": (sides.get("idle") or {}).get("watts"), "energy_reason": "; ".join(reasons) or None}

    def telemetry_figures(self) -> dict[str, Any]:
        """The row's SM clock range, peak power and temperature over its timed pairs, the clock event reasons
        seen, those that fail it (``throttle_reasons``; ``throttled``: any) and the timing mode."""
        tel = self.telemetry or {}
        keys = ("sm_clock_mhz_min", "sm_clock_mhz_max", "power_w_max", "temperature_c_max", "clock_reasons",
                "throttle_reasons", "throttled")
        figures = {key: tel.get(key) for key in keys}
        figures["telemetry_reason"] = tel.get("reason") if tel else "not sampled"
        figures["timing"] = (self.timing or {}).get("mode", "eager")
        return figures

    def summary(self) -> dict[str, Any]:
        """The headline figures: p50 latencies in ms, speedup with its 95% interval and pair count, ideal,
        decode latencies and decode POP/full ratio (identical work: 1 on a quiet machine) with its interval,
        joules per prefill of each side (:meth:`energy_figures`) and the row's telemetry
        (:meth:`telemetry_figures`)."""
        ci = self.prefill.speedup_ci
        figures: dict[str, Any] = {
            "full_ms": self.prefill.b.p50,
            "pop_ms": self.prefill.a.p50,
            "speedup": self.speedup,
            "speedup_lo": ci.lo,
            "speedup_hi": ci.hi,
            "pairs": self.prefill.count,
            "ideal": self.ideal,
            "above_ideal": self.above_ideal,
            "decode_full_ms_per_token": self.decode.b.p50 if self.decode else None,
            "decode_pop_ms_per_token": self.decode.a.p50 if self.decode else None,
            "kv_bytes": self.kv_bytes,
            "full_kv_bytes": self.full_kv_bytes,
        }
        if self.decode is not None:
            decode = self.decode.speedup_ci
            figures.update(decode_speedup=self.decode.speedup, decode_speedup_lo=decode.lo, decode_speedup_hi=decode.hi,
                           decode_pairs=self.decode.count)
        if self.image_tokens is not None:
            figures["image_tokens"] = self.image_tokens
        return figures | self.energy_figures() | self.telemetry_figures()

    def to_dict(self) -> dict[str, Any]:
        return {
            "length": self.length,
            "image": self.image,
            **self.summary(),
            "prefill": self.prefill.to_dict(),
            "decode": self.decode.to_dict() if self.decode else None,
            "telemetry": self.telemetry,
            "energy": self.energy,
            "timing": self.timing,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "BenchRow":
        decode = data.get("decode")
        return cls(
            length=int(data["length"]),
            prefill=PairRecord.from_dict(data["prefill"]),
            ideal=float(data["ideal"]),
            decode=PairRecord.from_dict(decode) if decode else None,
            image=data.get("image"),
            image_tokens=data.get("image_tokens"),
            telemetry=data.get("telemetry"),
            energy=data.get("energy"),
            timing=data.get("timing"),
            kv_bytes=data.get("kv_bytes"),
            full_kv_bytes=data.get("full_kv_bytes"),
        )


@dataclass
class BenchResult:
    """A whole ``poptune bench`` run, with what it ran on."""

    model: str
    config: PopConfig
    spec: BenchSpec
    rows: list[BenchRow]
    hardware: HardwareRecord
    telemetry: dict[str, Any]
    versions: dict[str, str]
    date: str
    dtype: str
    ideal_method: str = "flops"
    transform: dict[str, Any] | None = None
    null_check: NullCheck | None = None
    provenance: dict[str, Any] = field(default_factory=dict)
    ideal_assumption: str | None = None

    @property
    def noisy(self) -> bool:
        """Whether a null check failed: the machine was too noisy to trust these speedups."""
        return self.null_check is not None and self.null_check.noisy

    def imprecise(self) -> dict[str, float]:
        """Measurements whose interval stayed wider than the policy's precision (caps hit): label -> half-width."""
        target = self.spec.policy.precision
        if target is None:
            return {}
        wide = {}
        for row in self.rows:
            for kind, pair in (("prefill", row.prefill), ("decode", row.decode)):
                if pair is not None and pair.half_width > target:
                    wide[f"{kind} {row.image or row.length}"] = pair.half_width
        return wide

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "config": self.config.to_dict(),
            "transform": self.transform,
            "dtype": self.dtype,
            "lengths": list(self.spec.lengths),
            "images": [str(size) for size in self.spec.images],
            "batch_size": self.spec.batch_size,
            "decode_tokens": self.spec.decode_tokens,
            "prefill_chunk": self.spec.prefill_chunk,
            "graphs": self.spec.graphs,
            "energy_seconds": self.spec.energy_seconds,
            "policy": self.spec.policy.to_dict(),
            "ideal_method": self.ideal_method,
            "ideal_assumption": self.ideal_assumption,
            "null_check": self.null_check.to_dict() if self.null_check else None,
            "noisy": self.noisy,
            "imprecise": self.imprecise(),
            "provenance": self.provenance,
            "rows": [row.to_dict() for row in self.rows],
            "hardware": self.hardware.to_dict(),
            "telemetry": self.telemetry,
            "versions": self.versions,
            "date": self.date,
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "BenchResult":
        spec = BenchSpec(
            lengths=tuple(data["lengths"]),
            batch_size=data["batch_size"],
            decode_tokens=data["decode_tokens"],
            policy=RepeatPolicy.from_dict(data["policy"]),
            images=tuple(ImageSize.parse(text) for text in data.get("images", [])),
            null_check=data.get("null_check") is not None,
            prefill_chunk=data.get("prefill_chunk"),
            graphs=bool(data.get("graphs", False)),
            energy_seconds=data.get("energy_seconds", 0.0),
        )
        return cls(
            model=data["model"],
            config=PopConfig.from_dict(data["config"]),
            spec=spec,
            rows=[BenchRow.from_dict(row) for row in data["rows"]],
            hardware=HardwareRecord.from_dict(data["hardware"]),
            telemetry=data["telemetry"],
            versions=data["versions"],
            date=data["date"],
            dtype=data["dtype"],
            ideal_method=data.get("ideal_method", "flops"),
            transform=data.get("transform"),
            null_check=NullCheck.from_dict(data["null_check"]) if data.get("null_check") else None,
            provenance=data.get("provenance", {}),
            ideal_assumption=data.get("ideal_assumption"),
        )

    def table(self) -> str:
        """The result as a fixed-width text table (prompts as rows; image prompts lead with size and tokens)."""
        images = bool(self.spec.images)
        header = f"{'image':>9}  {'img tok':>7}  " if images else ""
        header += f"{'length':>7}  {'full ms':>9}  {'POP ms':>9}  {'speedup [95% CI]':>23}  {'pairs':>5}  {'ideal':>6}"
        if self.spec.decode_tokens:
            header += f"  {'decode full':>11}  {'decode POP':>10}  {'decode POP/full [CI]':>22}"
        energy = any(row.energy_figures()["energy_full_j"] is not None for row in self.rows)
        if energy:
            header += f"  {'J/prefill full':>14}  {'J/prefill POP':>13}"
        lines = [header]
        for row in self.rows:
            line = f"{row.image:>9}  {row.image_tokens:>7}  " if images else ""
            line += (
                f"{row.length:>7}  {row.prefill.b.p50:>9.1f}  {row.prefill.a.p50:>9.1f}  "
                f"{row.speedup:>6.3f}x {row.prefill.speedup_ci.bracket('.3f')}  {row.prefill.count:>5}  "
                f"{row.ideal:>5.2f}x"
                + (" !" if row.above_ideal else "")
            )
            if row.decode is not None:
                line += (f"  {row.decode.b.p50:>8.2f} ms  {row.decode.a.p50:>7.2f} ms  "
                         f"{row.decode.speedup:>5.3f} {row.decode.speedup_ci.bracket('.3f')}")
            if energy:
                joules = row.energy_figures()
                line += f"  {_joules(joules['energy_full_j']):>14}  {_joules(joules['energy_pop_j']):>13}"
            if row.telemetry and row.telemetry.get("throttled"):
                reasons = row.telemetry.get("throttle_reasons") or row.telemetry["clock_reasons"]
                line += "  throttled: " + ",".join(reasons)
            lines.append(line)
        return "\n".join(lines)


