"""POP against the full model through vLLM: time to first token of the same prompts, side by side.

The vLLM runtime of ``poptune bench`` (``--runtime vllm``): two vLLM engines on the same model directory, one
serving the configuration with poptune's plugin (:mod:`poptune.serving`), one the full model, each in its own
worker process. A side's call is one ``LLM.generate`` of the row's batch for one token: vLLM's time to first token
for those requests (prefill, the first token's sampling, vLLM's scheduling), as a client of the engine sees it. The
pairs, their order, the speedup's interval, the FLOPs ideal and the A/A check (the full engine against itself) are
the ones ``run_bench`` uses (:func:`poptune.measure.timer.measure_pair`, :mod:`poptune.measure.nullcheck`);
decode is not timed here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from poptune.engine import PopConfig
from poptune.errors import ConfigError
from poptune.measure.benchrecord import BenchResult, BenchRow, BenchSpec
from poptune.measure.flops import prefill_flops
from poptune.measure.hardware import fingerprint
from poptune.measure.nullcheck import NullCheck, aa_figures, aa_policy
from poptune.measure.provenance import Provenance, load_average
from poptune.measure.timer import Timer, measure_pair
from poptune.measure.timing_prompts import prompt_batch
from poptune.serving.vllm_client import VllmEngine

__all__ = ["engine_settings", "run_vllm_bench"]


def _call(engine: VllmEngine, prompts: list[list[int]]) -> Callable[[], Any]:
    return lambda: engine.generate(prompts, max_tokens=1)


def run_vllm_bench(directory: str | Path, tokenizer: Any, config: PopConfig, spec: BenchSpec, *, model_name: str,
                   progress: Callable[[str], None] | None = None, engine: dict[str, Any] | None = None,
                   engines: "tuple[VllmEngine, VllmEngine] | None" = None) -> BenchResult:
    """Time ``config`` served by vLLM against vLLM's full model at every length of ``spec`` (text prompts).

    Args:
        directory: The Hugging Face model directory vLLM loads.
        tokenizer: Its tokenizer, for the prompts' real token ids.
        config: The POP configuration (the paper's K/V source).
        spec: Lengths, batch size, repeat policy, null check (no images, graphs or decode here).
        model_name: Recorded as is.
        progress: Called with a short label after each measurement.
        engine: More of vLLM's engine arguments for both engines (when this call starts them).
        engines: Running engines ``(pop, full)`` to time on instead (POP's is given ``config`` first), kept running.
    """
    from transformers import AutoConfig

    if spec.images or spec.graphs or spec.prefill_chunk:
        raise ConfigError("the vLLM runtime times text prompts whole (no --image, --graphs or --prefill-chunk; vLLM "
                          "chunks long prompts itself)")
    text = AutoConfig.from_pretrained(directory).get_text_config()
    config.check(text.num_hidden_layers)
    load_start = load_average()
    with contextlib.ExitStack() as stack:
        if engines is None:
            settings = engine_settings(spec.lengths, spec.batch_size) | dict(engine or {})
            engines = (stack.enter_context(VllmEngine(directory, pop={"pop_config": config.to_dict()},
                                                      engine=settings)),
                       stack.enter_context(VllmEngine(directory, engine=settings)))
        else:
            engines[0].configure(config.to_dict())
        rows, aa = _timed(engines, tokenizer, text, config, spec, progress)
    hardware = fingerprint("cpu")
    made = Provenance.here(hardware=hardware.to_dict(), model=model_name)
    check = NullCheck(length=spec.lengths[0], aa=aa, decode={}, above_ideal=[r.length for r in rows if r.above_ideal])
    return BenchResult(model=model_name, config=config, spec=replace(spec, decode_tokens=0), rows=rows,
                       hardware=hardware, telemetry={}, versions=dict(made.versions or {}), date=made.date or "",
                       dtype="float32", null_check=check,
                       provenance={"runtime": "vllm", "load_start": load_start, "load_end": load_average()},
                       ideal_assumption="dense FLOPs of the prefill; vLLM's time to first token also holds its "
                                        "scheduling and the first token's sampling")


def engine_settings(lengths: "tuple[int, ...] | list[int]", batch_size: int) -> dict[str, Any]:
    """vLLM's engine arguments for prompts up to the longest of ``lengths``, ``batch_size`` at a time, whole."""
    longest = max(lengths) + 16
    return {"max_model_len": longest, "max_num_batched_tokens": max(longest * batch_size, 2048),
            "max_num_seqs": max(batch_size, 8)}


def _timed(engines: "tuple[VllmEngine, VllmEngine]", tokenizer: Any, text: Any, config: PopConfig, spec: BenchSpec,
           progress: Callable[[str], None] | None) -> tuple[list[BenchRow], dict[str, Any] | None]:
    """Each length's pair (POP, full) and, when asked, the A/A pair (the full engine against itself)."""
    pop, full = engines
    timer, rows = Timer("cpu"), []
    batches = {n: prompt_batch(tokenizer, n, spec.batch_size)["input_ids"].tolist() for n in spec.lengths}
    for n, prompts in batches.items():
        pair = measure_pair(_call(pop, prompts), _call(full, prompts), timer=timer, policy=spec.policy)
        ideal = prefill_flops(text, n) / prefill_flops(text, n, config)
        rows.append(BenchRow(n, pair, ideal, timing={"mode": "vllm", "reason": None, "decode": None, "mask": None}))
        if progress:
            progress(f"prefill {n}")
    aa = None
    if spec.null_check:
        first = _call(full, batches[spec.lengths[0]])
        aa = aa_figures(measure_pair(first, first, timer=timer, policy=aa_policy(spec.policy)))
        if progress:
            progress("A/A check")
    return rows, aa
