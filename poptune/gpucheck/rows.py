"""The measured rows of one model: ``poptune bench`` per batch size, the null checks, one profiler pass."""

from __future__ import annotations

from typing import Any

import torch

from poptune.gpucheck.plan import Case, Plan
from poptune.gpucheck.profile import launch_bound, profile_call
from poptune.engine import PopConfig
from poptune.measure.bench import BenchResult, BenchRow, BenchSpec, run_bench
from poptune.measure.prefill import prefill
from poptune.measure.prompts import image_prompt_batch, prompt_batch
from poptune.models.vision import kept_rope_state

__all__ = ["null_checks", "measure_case"]


def _bench(model: Any, tokenizer: Any, case: Case, plan: Plan, batch: int, *, decode: bool) -> BenchResult:
    spec = BenchSpec(
        lengths=case.lengths_at(batch) or (2,),  # image rows time the image prompt, whose length the image sets
        images=(case.image,) if case.image else (),
        batch_size=batch,
        decode_tokens=plan.decode_tokens if decode else 0,
        policy=plan.policy,
        null_check=decode,
        energy_seconds=plan.energy_seconds,
    )
    return run_bench(model, tokenizer, PopConfig(skip=case.skip), spec, model_name=case.model, weights="random")


def null_checks(model: Any, tokenizer: Any, plan: Plan) -> dict[str, Any]:
    """The A/A pair (full against full) at the null case's first length and POP's decode against the full
    model's there, as ratios with their intervals; plus the bench record behind them."""
    result = _bench(model, tokenizer, plan.null_case, plan, 1, decode=True)
    check = result.null_check
    assert check is not None and check.aa is not None  # null_check=True times the A/A pair
    return {"model": plan.null_case.model, "length": check.length, "aa": check.aa,
            "decode": check.decode[check.length], "bench": result.to_dict()}


def _inputs(model: Any, tokenizer: Any, case: Case, row: BenchRow, batch: int) -> dict[str, torch.Tensor]:
    device = next(model.parameters()).device
    if case.image is not None:
        return image_prompt_batch(model, tokenizer, case.image, batch, device=device)
    return prompt_batch(tokenizer, row.length, batch, device=device)


def _record(case: Case, batch: int, row: BenchRow, profiled: dict[str, Any]) -> dict[str, Any]:
    figures = row.summary()
    keep = ("full_ms", "pop_ms", "speedup", "speedup_lo", "speedup_hi", "pairs", "ideal", "energy_full_j",
            "energy_pop_j", "energy_full_net_j", "energy_pop_net_j", "idle_w", "energy_reason", "sm_clock_mhz_min", "sm_clock_mhz_max", "power_w_max",
            "temperature_c_max", "clock_reasons", "throttle_reasons", "throttled", "telemetry_reason", "timing")
    return {"model": case.model, "skip": case.skip, "batch": batch, "length": row.length, "image": row.image,
            "image_tokens": row.image_tokens, **{k: figures.get(k) for k in keep},
            "of_ideal": row.speedup / row.ideal, **launch_bound(profiled, row.prefill.b.p50)}


@torch.inference_mode()
def measure_case(model: Any, tokenizer: Any, case: Case, plan: Plan) -> tuple[list[dict[str, Any]], list[dict]]:
    """Every row of ``case`` (lengths or its image, at each batch size), each with its profile; and the bench
    records behind them."""
    device = next(model.parameters()).device
    results = [(batch, _bench(model, tokenizer, case, plan, batch, decode=False)) for batch in case.batches
               if case.image is not None or case.lengths_at(batch)]
    rows = []
    with kept_rope_state(model):
        for batch, result in results:
            for row in result.rows:
                inputs = _inputs(model, tokenizer, case, row, batch)
                profiled = profile_call(lambda: prefill(model, inputs, None), device)
                rows.append(_record(case, batch, row, profiled))
    return rows, [result.to_dict() for _, result in results]
