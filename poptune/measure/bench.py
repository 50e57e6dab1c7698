"""POP against the full model, side by side: prefill (time to first token) and decode latency per length.

Both are timed interleaved (POP, full, POP, full, ...) in one process on the same token ids, so drift in
clocks or load hits both alike; the speedup is the median of per-pair ratios. The ideal ratio from FLOPs
(:mod:`poptune.measure.flops`) is reported beside the measured one.
"""

from __future__ import annotations

import datetime as _dt
import json
import platform
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from poptune.baselines.surgery import Transform, applied
from poptune.engine import PopConfig, decoder_of
from poptune.errors import ConfigError
from poptune.measure.flops import prefill_flops
from poptune.measure.hardware import HardwareRecord, Telemetry, fingerprint
from poptune.measure.prefill import decode, prefill
from poptune.measure.prompts import prompt_batch
from poptune.measure.timer import LatencyRecord, PairRecord, RepeatPolicy, Staged, Timer, measure_pair

__all__ = ["BenchSpec", "BenchRow", "BenchResult", "run_bench", "versions"]


def versions() -> dict[str, str]:
    """Versions of what produced a measurement, for provenance."""
    import transformers

    from poptune import __version__

    return {
        "poptune": __version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
    }


@dataclass(frozen=True)
class BenchSpec:
    """What to time.

    Attributes:
        lengths: Prompt lengths in tokens.
        batch_size: Prompts per forward.
        decode_tokens: New tokens per decode measurement (0 = prefill only); latency is per token.
        policy: Repeats per measurement (each repeat is one POP/full pair).
    """

    lengths: tuple[int, ...] = (128, 512, 2048)
    batch_size: int = 1
    decode_tokens: int = 16
    policy: RepeatPolicy = field(default_factory=lambda: RepeatPolicy(warmup=1, min_repeats=5, min_seconds=2.0))

    def __post_init__(self) -> None:
        if not self.lengths:
            raise ConfigError("`lengths` must name at least one prompt length")
        bad = [n for n in self.lengths if isinstance(n, bool) or not isinstance(n, int) or n < 2]
        if bad:
            raise ConfigError(f"prompt lengths must be integers >= 2, got {bad}")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ConfigError(f"`batch_size` must be an integer >= 1, got {self.batch_size!r}")
        if not isinstance(self.decode_tokens, int) or self.decode_tokens < 0:
            raise ConfigError(f"`decode_tokens` must be an integer >= 0, got {self.decode_tokens!r}")


@dataclass
class BenchRow:
    """One prompt length: prefill pair, ideal ratio, and (optionally) decode per-token latency pair."""

    length: int
    prefill: PairRecord  # a = POP, b = full model
    ideal: float
    decode: PairRecord | None = None

    @property
    def speedup(self) -> float:
        return self.prefill.speedup

    def summary(self) -> dict[str, float | None]:
        """The headline figures (p50 latencies in ms, speedup, ideal), without the raw values."""
        return {
            "full_ms": self.prefill.b.p50,
            "pop_ms": self.prefill.a.p50,
            "speedup": self.speedup,
            "ideal": self.ideal,
            "decode_full_ms_per_token": self.decode.b.p50 if self.decode else None,
            "decode_pop_ms_per_token": self.decode.a.p50 if self.decode else None,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "length": self.length,
            **self.summary(),
            "prefill": self.prefill.to_dict(),
            "decode": self.decode.to_dict() if self.decode else None,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "BenchRow":
        decode = data.get("decode")
        return cls(
            length=int(data["length"]),
            prefill=PairRecord.from_dict(data["prefill"]),
            ideal=float(data["ideal"]),
            decode=PairRecord.from_dict(decode) if decode else None,
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

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "config": self.config.to_dict(),
            "transform": self.transform,
            "dtype": self.dtype,
            "lengths": list(self.spec.lengths),
            "batch_size": self.spec.batch_size,
            "decode_tokens": self.spec.decode_tokens,
            "policy": vars(self.spec.policy).copy(),
            "ideal_method": self.ideal_method,
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
            policy=RepeatPolicy(**data["policy"]),
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
        )

    def table(self) -> str:
        """The result as a fixed-width text table (lengths as rows)."""
        header = f"{'length':>7}  {'full ms':>9}  {'POP ms':>9}  {'speedup':>7}  {'ideal':>6}"
        if self.spec.decode_tokens:
            header += f"  {'decode full':>11}  {'decode POP':>10}"
        lines = [header]
        for row in self.rows:
            line = (
                f"{row.length:>7}  {row.prefill.b.p50:>9.1f}  {row.prefill.a.p50:>9.1f}  "
                f"{row.speedup:>6.2f}x  {row.ideal:>5.2f}x"
            )
            if row.decode is not None:
                line += f"  {row.decode.b.p50:>8.2f} ms  {row.decode.a.p50:>7.2f} ms"
            lines.append(line)
        return "\n".join(lines)


def _per_token(pair: PairRecord, steps: int) -> PairRecord:
    def scale(record: LatencyRecord) -> LatencyRecord:
        return LatencyRecord(values_ms=[v / steps for v in record.values_ms])

    return PairRecord(a=scale(pair.a), b=scale(pair.b))


@torch.inference_mode()
def run_bench(
    model: Any,
    tokenizer: Any,
    config: PopConfig,
    spec: BenchSpec,
    *,
    model_name: str,
    progress: Callable[[str], None] | None = None,
    transform: Transform | None = None,
) -> BenchResult:
    """Time POP with ``config`` against the full model at every length of ``spec``.

    Args:
        model: A loaded model (POP is applied per call and removed after; the model is left plain).
        tokenizer: Its tokenizer, for real token ids.
        config: The POP configuration.
        spec: Lengths, batch size, decode tokens and repeat policy.
        model_name: Recorded as is.
        progress: Called with a short label after each measurement (for a progress bar).
        transform: A baseline's model change (layers removed, sparse weights), applied around every call of
            the measured side -- prefill and decode -- and undone for the full model's calls.
    """
    decoder = decoder_of(model)
    with applied(model, transform):
        config.check(len(decoder.layers))
    limit = getattr(decoder.config, "max_position_embeddings", None)
    too_long = [n for n in spec.lengths if limit and n + spec.decode_tokens > limit]
    if too_long:
        raise ConfigError(f"prompt lengths {too_long} exceed this model's {limit} positions")

    device = next(model.parameters()).device
    timer = Timer(device)
    hardware = fingerprint(device)
    rows = []
    with Telemetry(hardware) as telemetry:
        for length in spec.lengths:
            inputs = prompt_batch(tokenizer, length, spec.batch_size, device=device)
            mask = inputs["attention_mask"]

            def measured_prefill() -> Any:
                with applied(model, transform):
                    return prefill(model, inputs, config)

            def measured_decode(out: Any) -> None:
                with applied(model, transform):
                    decode(model, out, mask, steps)

            steps = spec.decode_tokens
            prefill_pair = measure_pair(
                measured_prefill,
                lambda: prefill(model, inputs, None),
                timer=timer,
                policy=spec.policy,
            )
            if progress:
                progress(f"prefill {length}")
            decode_pair = None
            if spec.decode_tokens:
                decode_pair = _per_token(
                    measure_pair(
                        Staged(measured_prefill, measured_decode),
                        Staged(lambda: prefill(model, inputs, None), lambda out: decode(model, out, mask, steps)),
                        timer=timer,
                        policy=spec.policy,
                    ),
                    steps,
                )
                if progress:
                    progress(f"decode {length}")
            full_flops = prefill_flops(decoder.config, length)
            with applied(model, transform):  # a removal changes the config's depth and layer types
                ideal = full_flops / prefill_flops(decoder.config, length, config)
            rows.append(BenchRow(length, prefill_pair, ideal, decode_pair))
    return BenchResult(
        model=model_name,
        config=config,
        spec=spec,
        rows=rows,
        hardware=hardware,
        telemetry=telemetry.result().to_dict(),
        versions=versions(),
        date=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        dtype=str(next(model.parameters()).dtype).removeprefix("torch."),
        transform=transform.describe() if transform is not None else None,
    )
