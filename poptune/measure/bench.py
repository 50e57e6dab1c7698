"""POP against the full model, side by side: prefill (time to first token) and decode latency per length.

With image sizes, the prompts are one image and a short question each (vision-language models): one row per
resolution, with the prompt's image-token count; the vision encoder is timed on both sides, as in real use.

Both are timed as pairs (POP then full, full then POP, in turn) in one process on the same token ids, so
drift in clocks or load hits both alike; the speedup is the median of per-pair ratios, with its 95% bootstrap
interval, and pairs continue until that interval is +-2% of it (within caps). The ideal ratio from FLOPs
(:mod:`poptune.measure.flops`) is reported beside the measured one. Null checks
(:mod:`poptune.measure.nullcheck`) say whether the machine was quiet enough to trust the figures.
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
from poptune.measure.flops import assumption, prefill_flops, vision_flops
from poptune.measure.hardware import HardwareRecord, Telemetry, fingerprint
from poptune.measure.nullcheck import NullCheck, above_ideal, figures
from poptune.measure.provenance import load_average, provenance
from poptune.measure.stats import MIN_BOOTSTRAP
from poptune.measure.prefill import decode, prefill
from poptune.segments import chunk_bounds
from poptune.measure.prompts import image_prompt_batch, prompt_batch
from poptune.models.vision import ImageSize, encoder_patches, image_token_counts, kept_rope_state, require_vision
from poptune.measure.timer import LatencyRecord, PairRecord, RepeatPolicy, Staged, Timer, measure_pair

__all__ = ["DEFAULT_POLICY", "BenchSpec", "BenchRow", "BenchResult", "run_bench", "versions"]

#: ``poptune bench``'s rule: at least 5 pairs and 1 s, then on until the interval is +-2% (60 pairs, 20 s at most).
DEFAULT_POLICY = RepeatPolicy(warmup=1, min_repeats=5, min_seconds=1.0, max_repeats=60, precision=0.02,
                              max_seconds=20.0)


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
        lengths: Prompt lengths in tokens (text prompts).
        batch_size: Prompts per forward.
        decode_tokens: New tokens per decode measurement (0 = prefill only); latency is per token.
        policy: Repeats per measurement (each repeat is one POP/full pair) and when to stop.
        null_check: Also time an A/A pair (full against full) at the first length (see
            :mod:`poptune.measure.nullcheck`).
        images: Image resolutions; when given, each row is a prompt of one image of that size and a short
            question (a vision-language model only) and ``lengths`` are not timed.
        prefill_chunk: Prefill in chunks of this many tokens, POP and the full model alike (None: whole
            prompts; text prompts only), see :mod:`poptune.segments`.
    """

    lengths: tuple[int, ...] = (128, 512, 2048)
    batch_size: int = 1
    decode_tokens: int = 16
    policy: RepeatPolicy = field(default_factory=lambda: DEFAULT_POLICY)
    images: tuple[ImageSize, ...] = ()
    null_check: bool = True
    prefill_chunk: int | None = None

    def __post_init__(self) -> None:
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
    of those tokens are ``image_tokens``.
    """

    length: int
    prefill: PairRecord  # a = POP, b = full model
    ideal: float
    decode: PairRecord | None = None
    image: str | None = None
    image_tokens: int | None = None

    @property
    def speedup(self) -> float:
        return self.prefill.speedup

    @property
    def above_ideal(self) -> bool:
        """Whether the prefill speedup is above the FLOPs ideal by more than its interval (from 3 pairs on)."""
        return self.prefill.count >= MIN_BOOTSTRAP and above_ideal(self.prefill.speedup_ci[0], self.ideal)

    def summary(self) -> dict[str, float | None]:
        """The headline figures: p50 latencies in ms, speedup with its 95% interval and pair count, ideal,
        decode latencies and decode POP/full ratio (identical work: 1 on a quiet machine) with its interval."""
        lo, hi = self.prefill.speedup_ci
        figures: dict[str, float | None] = {
            "full_ms": self.prefill.b.p50,
            "pop_ms": self.prefill.a.p50,
            "speedup": self.speedup,
            "speedup_lo": lo,
            "speedup_hi": hi,
            "pairs": self.prefill.count,
            "ideal": self.ideal,
            "above_ideal": self.above_ideal,
            "decode_full_ms_per_token": self.decode.b.p50 if self.decode else None,
            "decode_pop_ms_per_token": self.decode.a.p50 if self.decode else None,
        }
        if self.decode is not None:
            dlo, dhi = self.decode.speedup_ci
            figures.update(decode_speedup=self.decode.speedup, decode_speedup_lo=dlo, decode_speedup_hi=dhi,
                           decode_pairs=self.decode.count)
        if self.image_tokens is not None:
            figures["image_tokens"] = self.image_tokens
        return figures

    def to_dict(self) -> dict[str, Any]:
        return {
            "length": self.length,
            "image": self.image,
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
            image=data.get("image"),
            image_tokens=data.get("image_tokens"),
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
        lines = [header]
        for row in self.rows:
            line = f"{row.image:>9}  {row.image_tokens:>7}  " if images else ""
            lo, hi = row.prefill.speedup_ci
            line += (
                f"{row.length:>7}  {row.prefill.b.p50:>9.1f}  {row.prefill.a.p50:>9.1f}  "
                f"{row.speedup:>6.3f}x [{lo:.3f}, {hi:.3f}]  {row.prefill.count:>5}  {row.ideal:>5.2f}x"
                + (" !" if row.above_ideal else "")
            )
            if row.decode is not None:
                dlo, dhi = row.decode.speedup_ci
                line += (f"  {row.decode.b.p50:>8.2f} ms  {row.decode.a.p50:>7.2f} ms  "
                         f"{row.decode.speedup:>5.3f} [{dlo:.3f}, {dhi:.3f}]")
            lines.append(line)
        return "\n".join(lines)


@dataclass
class _PromptRow:
    """A prompt to measure: its inputs and what its row reports about it."""

    inputs: dict[str, torch.Tensor]
    length: int
    image: str | None = None
    image_tokens: int | None = None
    fixed_flops: float = 0.0  # per prompt, spent alike by POP and the full model (the vision encoder)


def _prompt_row(model: Any, tokenizer: Any, item: "int | ImageSize", batch_size: int, device: Any) -> _PromptRow:
    """The text prompt of ``item`` tokens, or the image prompt of an ``item``-sized image."""
    if isinstance(item, ImageSize):
        inputs = image_prompt_batch(model, tokenizer, item, batch_size, device=device)
        return _PromptRow(
            inputs=inputs,
            length=inputs["input_ids"].shape[1],
            image=str(item),
            image_tokens=image_token_counts(model, inputs)[0],
            fixed_flops=vision_flops(model.config, encoder_patches(model.config, inputs)),
        )
    return _PromptRow(inputs=prompt_batch(tokenizer, item, batch_size, device=device), length=item)


def _per_token(pair: PairRecord, steps: int) -> PairRecord:
    def scale(record: LatencyRecord) -> LatencyRecord:
        return LatencyRecord(values_ms=[v / steps for v in record.values_ms])

    return PairRecord(a=scale(pair.a), b=scale(pair.b))


def _measure_row(model: Any, prompt: _PromptRow, config: PopConfig, spec: BenchSpec, timer: Timer,
                 transform: Transform | None, progress: Callable[[str], None] | None, label: str) -> BenchRow:
    """Time one prompt: the prefill pair, the decode pair (per token) and the ideal ratio."""
    decoder = decoder_of(model)
    inputs, steps, chunk = prompt.inputs, spec.decode_tokens, spec.prefill_chunk

    def measured_prefill() -> Any:
        with applied(model, transform):
            return prefill(model, inputs, config, chunk)

    def measured_decode(out: Any) -> None:
        with applied(model, transform):
            decode(model, out, inputs, steps)

    prefill_pair = measure_pair(measured_prefill, lambda: prefill(model, inputs, None, chunk), timer=timer,
                                policy=spec.policy)
    if progress:
        progress(f"prefill {label}")
    decode_pair = None
    if steps:
        full = Staged(lambda: prefill(model, inputs, None, chunk), lambda out: decode(model, out, inputs, steps))
        decode_pair = _per_token(measure_pair(Staged(measured_prefill, measured_decode), full, timer=timer,
                                              policy=spec.policy), steps)
        if progress:
            progress(f"decode {label}")
    attention = getattr(decoder.config, "_attn_implementation", None)
    full_flops = prompt.fixed_flops + prefill_flops(decoder.config, prompt.length, attention=attention)
    with applied(model, transform):  # a removal changes the config's depth and layer types
        ideal = full_flops / (prompt.fixed_flops + prefill_flops(decoder.config, prompt.length, config,
                                                                 attention=attention))
    return BenchRow(prompt.length, prefill_pair, ideal, decode_pair, prompt.image, prompt.image_tokens)


def _null_check(model: Any, prompt: _PromptRow, rows: list[BenchRow], spec: BenchSpec, timer: Timer) -> NullCheck:
    """The run's null checks: an A/A pair at ``prompt`` (when asked for), every decode pair, the ideal check."""
    aa = None
    if spec.null_check:
        inputs = prompt.inputs

        def full() -> Any:
            return prefill(model, inputs, None, spec.prefill_chunk)

        aa = figures(measure_pair(full, full, timer=timer, policy=spec.policy))
    return NullCheck(length=prompt.length, aa=aa,
                     decode={row.length: figures(row.decode) for row in rows if row.decode is not None},
                     above_ideal=[row.length for row in rows if row.above_ideal])


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
    weights: str | None = None,
) -> BenchResult:
    """Time POP with ``config`` against the full model at every length (or image size) of ``spec``.

    Args:
        model: A loaded model (POP is applied per call and removed after; the model is left plain).
        tokenizer: Its tokenizer, for real token ids.
        config: The POP configuration.
        spec: Lengths or image sizes, batch size, decode tokens, repeat policy and null check.
        model_name: Recorded as is.
        progress: Called with a short label after each measurement (for a progress bar).
        transform: A baseline's model change (layers removed, sparse weights), applied around every call of
            the measured side -- prefill and decode -- and undone for the full model's calls.
        weights: ``pretrained`` or ``random`` as loaded, for the provenance record.
    """
    decoder = decoder_of(model)
    with applied(model, transform):
        config.check(len(decoder.layers))
    if spec.images:
        require_vision(model, model_name)
    limit = getattr(decoder.config, "max_position_embeddings", None)
    too_long = [n for n in spec.lengths if limit and n + spec.decode_tokens > limit]
    if too_long and not spec.images:
        raise ConfigError(f"prompt lengths {too_long} exceed this model's {limit} positions")

    device = next(model.parameters()).device
    timer = Timer(device)
    hardware = fingerprint(device)
    record = provenance(model, model_name=model_name, weights=weights)
    rows, prompts = [], []
    with Telemetry(hardware) as telemetry, kept_rope_state(model):
        for item in spec.images or spec.lengths:
            prompt = _prompt_row(model, tokenizer, item, spec.batch_size, device)
            if limit and prompt.length + spec.decode_tokens > limit:
                raise ConfigError(f"the {item} image prompt ({prompt.length} tokens) exceeds this model's {limit} positions")
            prompts.append(prompt)
            rows.append(_measure_row(model, prompt, config, spec, timer, transform, progress, str(item)))
        check = _null_check(model, prompts[0], rows, spec, timer)
        if progress and spec.null_check:
            progress("A/A check")
    record["load_end"] = load_average()
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
        null_check=check,
        provenance=record,
        ideal_assumption=assumption(getattr(decoder.config, "_attn_implementation", None)),
    )
