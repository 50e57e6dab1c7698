"""The measured rows of one model: ``poptune bench`` per row, the null checks, one profiler pass per row.

Each row is one bench run (its own idle block, after the GPU has settled), handed to ``on_row`` as soon as it is
measured, so the report can be written after every row: a stage stopped half-way keeps the rows it measured.
Everything is timed inside :func:`~poptune.measure.windows.window_sizes_on_device`: Gemma-3's sliding-window
layers copy no window size to the device inside a timed call.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from functools import partial
from typing import Any

import torch

from poptune.engine import PopConfig
from poptune.gpucheck.plan import Case, Plan
from poptune.gpucheck.profile import launch_bound, profile_call
from poptune.measure.bench import BenchResult, BenchRow, BenchSpec, run_bench
from poptune.measure.prefill import prefill
from poptune.measure.timing_prompts import image_prompt_batch, prompt_batch
from poptune.measure.windows import window_sizes_on_device
from poptune.models.vision import kept_rope_state

__all__ = ["null_checks", "measure_case", "row_items"]

#: Called with each row's record and the bench record behind it, as soon as the row is measured.
OnRow = Callable[[dict[str, Any], dict[str, Any]], None]


def _bench(model: Any, tokenizer: Any, case: Case, plan: Plan, batch: int, lengths: tuple[int, ...], *,
           decode: bool, energy: bool = True) -> BenchResult:
    spec = BenchSpec(
        lengths=lengths or (2,),  # image rows time the image prompt, whose length the image sets
        images=(case.image,) if case.image else (),
        batch_size=batch,
        decode_tokens=plan.decode_tokens if decode else 0,
        policy=plan.policy,
        null_check=decode,
        energy_seconds=plan.energy_seconds if energy else 0.0,
    )
    with window_sizes_on_device(model):
        return run_bench(model, tokenizer, PopConfig(skip=case.skip), spec, model_name=case.model, weights="random")


def null_checks(model: Any, tokenizer: Any, plan: Plan) -> dict[str, Any]:
    """The A/A pair (full against full) at the null case's first length and POP's decode against the full
    model's there, as ratios with their intervals; plus the bench record behind them. No energy blocks: nothing
    reads them, and on a long call they cost seconds the plan has not got."""
    case = plan.null_case
    result = _bench(model, tokenizer, case, plan, 1, case.lengths[:1], decode=True, energy=False)
    check = result.null_check
    assert check is not None and check.aa is not None  # null_check=True times the A/A pair
    return {"model": case.model, "length": check.length, "aa": check.aa,
            "decode": check.decode[check.length], "bench": result.to_dict()}


def _inputs(model: Any, tokenizer: Any, case: Case, row: BenchRow, batch: int) -> dict[str, torch.Tensor]:
    device = next(model.parameters()).device
    if case.image is not None:
        return image_prompt_batch(model, tokenizer, case.image, batch, device=device)
    return prompt_batch(tokenizer, row.length, batch, device=device)


def _record(case: Case, batch: int, row: BenchRow, profiled: dict[str, Any]) -> dict[str, Any]:
    figures = row.summary()
    keep = ("full_ms", "pop_ms", "speedup", "speedup_lo", "speedup_hi", "pairs", "ideal", "energy_full_j",
            "energy_pop_j", "energy_full_net_j", "energy_pop_net_j", "idle_w", "energy_reason", "sm_clock_mhz_min",
            "sm_clock_mhz_max", "power_w_max", "temperature_c_max", "clock_reasons", "throttle_reasons", "throttled",
            "telemetry_reason", "timing")
    return {"model": case.model, "skip": case.skip, "batch": batch, "length": row.length, "image": row.image,
            "image_tokens": row.image_tokens, **{k: figures.get(k) for k in keep},
            "of_ideal": row.speedup / row.ideal, **launch_bound(profiled, row.prefill.b.p50)}


def row_items(case: Case) -> list[tuple[int, tuple[int, ...]]]:
    """Each row of ``case`` as (batch, the lengths its bench run takes): one length, or none for the image."""
    if case.image is not None:
        return [(batch, ()) for batch in case.batches]
    return [(batch, (n,)) for batch in case.batches for n in case.lengths_at(batch)]


@torch.inference_mode()
def measure_case(model: Any, tokenizer: Any, case: Case, plan: Plan, on_row: OnRow,
                 done: Collection[tuple[int, int | None]] = frozenset()) -> None:
    """Measures every row of ``case`` (its lengths or its image, at each batch size) with its profile, handing
    each to ``on_row`` with its bench record as soon as it is measured; energy blocks where the case has them
    (:meth:`~poptune.gpucheck.plan.Case.energy`). Rows in ``done`` ((batch, length or None for the image): a
    cut run's) are not measured again."""
    device = next(model.parameters()).device
    for batch, lengths in row_items(case):
        length = lengths[0] if lengths else None
        if (batch, length) in done:
            continue
        result = _bench(model, tokenizer, case, plan, batch, lengths, decode=False, energy=case.energy(length, batch))
        (row,) = result.rows
        with kept_rope_state(model), window_sizes_on_device(model):
            inputs = _inputs(model, tokenizer, case, row, batch)
            profiled = profile_call(partial(prefill, model, inputs, None), device)
        on_row(_record(case, batch, row, profiled), result.to_dict())
