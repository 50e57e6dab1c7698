"""POP against the full model, side by side: prefill (time to first token) and decode latency per length.

With image sizes, the prompts are one image and a short question each (vision-language models): one row per
resolution, with the prompt's image-token count; the vision encoder is timed on both sides, as in real use.

Both are timed as pairs (POP then full, full then POP, in turn) in one process on the same token ids, so
drift in clocks or load hits both alike; the speedup is the median of per-pair ratios, with its 95%
order-statistic interval (:mod:`poptune.measure.stats`), and pairs continue until that interval is +-2% of it
(within caps; judged from 6 pairs on, on whole A-B/B-A blocks). The ideal ratio from FLOPs
(:mod:`poptune.measure.flops`) is reported beside the measured one. Null checks
(:mod:`poptune.measure.nullcheck`) say whether the machine was quiet enough to trust the figures.

On a GPU each row also records NVML telemetry sampled through its timed pairs, each side's joules per prefill
from energy blocks of its own (alternated, with the idle power beside them: :mod:`poptune.measure.energy`),
and, with ``graphs``, prefills timed as replayed CUDA graphs (records:
:mod:`poptune.measure.benchrecord`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch

from poptune.device import dtype_of
from poptune.engine import PopConfig, decoder_of
from poptune.errors import ConfigError
from poptune.measure.benchrecord import DEFAULT_POLICY, BenchResult, BenchRow, BenchSpec, device_policy
from poptune.measure.energy import IdleReading, energy_pair, idle_power
from poptune.measure.flops import assumption, prefill_flops, vision_flops
from poptune.measure.graphs import DECODE_EAGER, capture, graph_inputs, mask_label
from poptune.measure.hardware import fingerprint
from poptune.measure.nullcheck import NullCheck, aa_figures, aa_policy, figures
from poptune.measure.nvml import NvmlDevice
from poptune.measure.prefill import cache_bytes, decode, prefill
from poptune.measure.provenance import Provenance, load_average, provenance
from poptune.measure.telemetry import Sampler, Telemetry, nvml_device
from poptune.measure.timer import LatencyRecord, PairRecord, Staged, Timer, measure_pair
from poptune.measure.timing_prompts import image_prompt_batch, prompt_batch
from poptune.measure.windows import window_sizes_on_device
from poptune.models.vision import ImageSize, encoder_patches, image_token_counts, kept_rope_state, require_vision
from poptune.transform import Transform, applied

__all__ = ["DEFAULT_POLICY", "BenchSpec", "BenchRow", "BenchResult", "run_bench"]

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


@dataclass
class _Row:
    """What every row of one run shares: the model, configuration, spec and the measuring tools."""

    model: Any
    config: PopConfig
    spec: BenchSpec
    timer: Timer
    gpu: NvmlDevice
    transform: Transform | None
    progress: Callable[[str], None] | None
    idle: IdleReading  # the GPU's idle power, measured once per run before the first row


def _sides(run: _Row, inputs: dict[str, torch.Tensor]) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """The two prefill calls of a row: POP (with the baseline's transform) and the full model."""
    model, config, transform, chunk = run.model, run.config, run.transform, run.spec.prefill_chunk

    def measured() -> Any:
        with applied(model, transform):
            return prefill(model, inputs, config, chunk)

    return measured, lambda: prefill(model, inputs, None, chunk)


def _prefill_pair(run: _Row, inputs: dict[str, torch.Tensor],
                  sampler: Sampler) -> tuple[PairRecord, dict[str, Any], dict[str, Any]]:
    """The row's prefill pair (``sampler`` reading NVML through its timed pairs), how it was timed, and each
    side's energy blocks."""
    pop, full = _sides(run, inputs)
    timing: dict[str, Any] = {"mode": "eager", "reason": None, "decode": DECODE_EAGER, "mask": None}
    if run.spec.graphs:
        captured = graph_inputs(inputs)  # no mask for an unpadded text prompt: SDPA's causal path under capture
        graphed = [capture(side, run.timer.device) for side in _sides(run, captured)]
        if all(g.graph is not None for g in graphed):  # both sides alike, or the ratio mixes two timings
            pop, full = graphed[0].call, graphed[1].call
            timing["mode"] = "cuda-graph"
            seen = tuple(sorted({kind for g in graphed for kind in g.sdpa}))
            timing["mask"], timing["sdpa"] = mask_label(seen, captured), list(seen)  # what ran, not what was asked
        else:
            timing["reason"] = next(g.reason for g in graphed if g.reason)
    pair = measure_pair(pop, full, timer=run.timer, policy=run.spec.policy, during=sampler)
    sides = energy_pair(pop, full, gpu=run.gpu, timer=run.timer, min_seconds=run.spec.energy_seconds, idle=run.idle)
    energy = {name: reading.to_dict() for name, reading in sides.items()} | {"idle": run.idle.to_dict()}
    return pair, timing, energy


def _measure_row(run: _Row, prompt: _PromptRow, label: str) -> BenchRow:
    """Time one prompt: the prefill pair, the decode pair (per token) and the ideal ratio, with telemetry."""
    model, transform, inputs, steps = run.model, run.transform, prompt.inputs, run.spec.decode_tokens
    sampler = Sampler(run.gpu)  # entered by the repeat loop around the timed pairs only
    prefill_pair, timing, energy = _prefill_pair(run, inputs, sampler)
    if run.progress:
        run.progress(f"prefill {label}")
    decode_pair = None
    pop, whole = _sides(run, inputs)
    sizes: dict[str, int] = {}  # each side's K/V cache after its prefill, per request (untimed)
    if steps:

        def measured_decode(out: Any) -> None:
            with applied(model, transform):
                decode(model, out, inputs, steps)

        full = Staged(_sized(whole, sizes, "full", prompt), lambda out: decode(model, out, inputs, steps))
        decode_pair = _per_token(measure_pair(Staged(_sized(pop, sizes, "pop", prompt), measured_decode), full,
                                              timer=run.timer, policy=run.spec.policy, during=sampler), steps)
        if run.progress:
            run.progress(f"decode {label}")
    else:  # no decode pair to read the caches from: one more prefill of each side, untimed
        _sized(pop, sizes, "pop", prompt)()
        _sized(whole, sizes, "full", prompt)()
    decoder = decoder_of(model)
    attention = getattr(decoder.config, "_attn_implementation", None)
    dense = timing.get("mask") == "materialised"  # a graph given a 4-D mask computes the whole square
    full_flops = prompt.fixed_flops + prefill_flops(decoder.config, prompt.length, attention=attention,
                                                    materialised=dense)
    with applied(model, transform):  # a removal changes the config's depth and layer types
        ideal = full_flops / (prompt.fixed_flops + prefill_flops(decoder.config, prompt.length, run.config,
                                                                 attention=attention, materialised=dense))
    return BenchRow(prompt.length, prefill_pair, ideal, decode_pair, prompt.image, prompt.image_tokens,
                    telemetry=sampler.summary(), energy=energy, timing=timing, kv_bytes=sizes.get("pop"),
                    full_kv_bytes=sizes.get("full"))


def _sized(side: Callable[[], Any], sizes: dict[str, int], name: str, prompt: _PromptRow) -> Callable[[], Any]:
    """``side`` (a prefill), noting the first time it runs the bytes of its K/V cache per request in
    ``sizes[name]`` (:func:`~poptune.measure.prefill.cache_bytes` over the batch's prompts)."""

    def run() -> Any:
        out = side()
        if name not in sizes:
            sizes[name] = cache_bytes(out.cache, prompt.inputs["input_ids"].shape[0])
        return out

    return run


def _null_check(model: Any, prompt: _PromptRow, rows: list[BenchRow], spec: BenchSpec, timer: Timer) -> NullCheck:
    """The run's null checks: an A/A pair at ``prompt`` (when asked for: at least :data:`AA_PAIRS` pairs, its
    equivalence test), every decode pair, the ideal check."""
    aa = None
    if spec.null_check:
        inputs = prompt.inputs

        def full() -> Any:
            return prefill(model, inputs, None, spec.prefill_chunk)

        aa = aa_figures(measure_pair(full, full, timer=timer, policy=aa_policy(spec.policy)))
    return NullCheck(length=prompt.length, aa=aa,
                     decode={row.length: figures(row.decode) for row in rows if row.decode is not None},
                     above_ideal=[row.length for row in rows if row.above_ideal])


def _check(model: Any, config: PopConfig, spec: BenchSpec, model_name: str, transform: Transform | None) -> None:
    """Refuses a run that cannot be made: a configuration or lengths the model has not, graphs on CPU."""
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
    if spec.graphs and device.type != "cuda":
        raise ConfigError(f"`graphs` (CUDA graph timing) needs a model on a CUDA device, this one is on {device}")


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
        spec: Lengths or image sizes, batch size, decode tokens, repeat policy, null check, graphs, energy.
        model_name: Recorded as is.
        progress: Called with a short label after each measurement (for a progress bar).
        transform: A baseline's model change (layers removed, sparse weights), applied around every call of
            the measured side -- prefill and decode -- and undone for the full model's calls.
        weights: ``pretrained`` or ``random`` as loaded, for the provenance record.
    """
    _check(model, config, spec, model_name, transform)
    decoder = decoder_of(model)
    limit = getattr(decoder.config, "max_position_embeddings", None)
    device = next(model.parameters()).device
    spec = replace(spec, policy=device_policy(spec.policy, device))  # a GPU warms up >= 1 s at the timed shape
    hardware = fingerprint(device)
    record = provenance(model, model_name=model_name, weights=weights)
    rows, prompts = [], []
    with Telemetry(hardware) as telemetry, nvml_device(hardware) as gpu, kept_rope_state(model), \
            window_sizes_on_device(model):  # Gemma-3's sliding window sizes made on the device once, not per prefill
        timer = Timer(device)
        run = _Row(model, config, spec, timer, gpu, transform, progress, idle_power(gpu, timer, spec.energy_seconds))
        for item in spec.images or spec.lengths:
            prompt = _prompt_row(model, tokenizer, item, spec.batch_size, device)
            if limit and prompt.length + spec.decode_tokens > limit:
                raise ConfigError(f"the {item} image prompt ({prompt.length} tokens) exceeds this model's {limit} "
                                  "positions")
            prompts.append(prompt)
            rows.append(_measure_row(run, prompt, str(item)))
        check = _null_check(model, prompts[0], rows, spec, run.timer)
        if progress and spec.null_check:
            progress("A/A check")
    record["load_end"] = load_average()
    made = Provenance.here(hardware=hardware.to_dict(), model=model_name)
    return BenchResult(
        model=model_name, config=config, spec=spec, rows=rows, hardware=hardware,
        telemetry=telemetry.result().to_dict(), versions=dict(made.versions or {}),
        date=made.date or "",
        dtype=dtype_of(model),
        transform=transform.describe() if transform is not None else None,
        null_check=check, provenance=record,
        ideal_assumption=assumption(getattr(decoder.config, "_attn_implementation", None), graphs=spec.graphs),
    )
