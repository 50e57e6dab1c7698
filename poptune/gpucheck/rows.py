"""The measured rows of one model: ``poptune bench`` per row, the null checks, one profiler pass per row.

Each row is one bench run (its own idle block, after the GPU has settled), handed to ``on_row`` as soon as it is
measured, so the report can be written after every row: a stage stopped half-way keeps the rows it measured.
Everything is timed inside :func:`~poptune.measure.windows.window_sizes_on_device`: Gemma-3's sliding-window
layers copy no window size to the device inside a timed call.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection
from functools import partial
from typing import Any

import torch

from poptune.engine import PopConfig
from poptune.gpucheck.plan import Case, Plan, wide
from poptune.gpucheck.profile import launch_bound, profile_call
from poptune.measure.bench import BenchResult, BenchRow, BenchSpec, run_bench
from poptune.measure.prefill import prefill
from poptune.measure.timing_prompts import image_prompt_batch, prompt_batch
from poptune.measure.windows import window_sizes_on_device
from poptune.models.vision import kept_rope_state

__all__ = ["aa_checks", "null_checks", "measure_case", "row_items", "row_key"]

#: Called with each row's record and the bench record behind it, as soon as the row is measured.
OnRow = Callable[[dict[str, Any], dict[str, Any]], None]


def _bench(model: Any, tokenizer: Any, case: Case, plan: Plan, batch: int, lengths: tuple[int, ...], *,
           decode: bool, energy: bool = True, aa: bool | None = None, graphs: bool = False) -> BenchResult:
    spec = BenchSpec(
        lengths=lengths or (2,),  # image rows time the image prompt, whose length the image sets
        images=(case.image,) if case.image else (),
        batch_size=batch,
        decode_tokens=plan.decode_tokens if decode else 0,
        policy=plan.policy,
        null_check=decode if aa is None else aa,
        energy_seconds=plan.energy_seconds if energy else 0.0,
        graphs=graphs,
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


def aa_checks(model: Any, tokenizer: Any, plan: Plan) -> list[dict[str, Any]]:
    """The A/A pair at each further length of the null case (issue 89: at 512 as well as 2,048 tokens), without
    decode pairs or energy blocks; each with the bench record behind it."""
    case, out = plan.null_case, []
    for n in case.lengths[1:]:
        result = _bench(model, tokenizer, case, plan, 1, (n,), decode=False, energy=False, aa=True)
        check = result.null_check
        assert check is not None and check.aa is not None
        out.append({"model": case.model, "length": check.length, "aa": check.aa, "bench": result.to_dict()})
    return out


def _inputs(model: Any, tokenizer: Any, case: Case, row: BenchRow, batch: int) -> dict[str, torch.Tensor]:
    device = next(model.parameters()).device
    if case.image is not None:
        return image_prompt_batch(model, tokenizer, case.image, batch, device=device)
    return prompt_batch(tokenizer, row.length, batch, device=device)


def _record(case: Case, batch: int, row: BenchRow, profiled: dict[str, Any]) -> dict[str, Any]:
    figures = row.summary()
    keep = ("full_ms", "pop_ms", "speedup", "speedup_lo", "speedup_hi", "pairs", "ideal", "energy_full_j",
            "energy_pop_j", "energy_full_j_lo", "energy_full_j_hi", "energy_pop_j_lo", "energy_pop_j_hi",
            "energy_full_net_j", "energy_pop_net_j", "idle_w", "energy_reason", "sm_clock_mhz_min",
            "sm_clock_mhz_max", "power_w_max", "temperature_c_max", "clock_reasons", "throttle_reasons", "throttled",
            "telemetry_reason", "timing")
    return {"model": case.model, "skip": case.skip, "batch": batch, "length": row.length, "image": row.image,
            "image_tokens": row.image_tokens, **{k: figures.get(k) for k in keep},
            "of_ideal": row.speedup / row.ideal, **launch_bound(profiled, row.prefill.b.p50)}


def row_items(case: Case) -> list[tuple[int, tuple[int, ...], bool]]:
    """Each row of ``case`` as (batch, the lengths its bench run takes: one length, or none for the image, whether
    it is timed with CUDA graphs), the graphed rows last (:attr:`~poptune.gpucheck.plan.Case.graphs_at`)."""
    eager: list[tuple[int, tuple[int, ...], bool]]
    if case.image is not None:
        eager = [(batch, (), False) for batch in case.batches]
    else:
        eager = [(batch, (n,), False) for batch in case.batches for n in case.lengths_at(batch)]
    return eager + [(batch, () if n is None else (n,), True) for n, batch in case.graphs_at]


def row_key(row: dict[str, Any]) -> tuple[int, int | None, bool]:
    """(batch, length or None for the image, graphs asked): what tells a case's rows apart."""
    return row["batch"], None if row["image"] else row["length"], bool(row.get("graphs"))



@torch.inference_mode()
def measure_case(model: Any, tokenizer: Any, case: Case, plan: Plan, on_row: OnRow,
                 done: Collection[tuple[int, int | None, bool]] = frozenset(),
                 spare: Callable[[], float] = lambda: math.inf) -> None:
    """Measures every row of ``case`` (its lengths or its image, at each batch size; then its graphed rows) with its
    profile, handing each to ``on_row`` with its bench record as soon as it is measured; energy blocks where the
    case has them (:meth:`~poptune.gpucheck.plan.Case.energy`). Rows in ``done`` (:func:`row_key`: a cut run's)
    are not measured again. Then each row whose interval came out wider than the plan's precision target is measured
    once more, while ``spare()`` (seconds the later stages do not need) holds 1.25 times what it took: the row
    handed on again carries its first figures (``first``)."""
    measured = []
    for batch, lengths, graphs in row_items(case):
        if (batch, lengths[0] if lengths else None, graphs) in done:
            continue
        start = time.monotonic()
        row = _measure_row(model, tokenizer, case, plan, batch, lengths, graphs, on_row)
        measured.append((batch, lengths, graphs, time.monotonic() - start, row))
    for batch, lengths, graphs, seconds, first in measured:
        if wide(first, plan.policy.precision) and spare() > 1.25 * seconds:
            first_figures = {k: first[k] for k in ("speedup", "speedup_lo", "speedup_hi", "pairs", "full_ms",
                                                    "pop_ms")}
            _measure_row(model, tokenizer, case, plan, batch, lengths, graphs, on_row, first=first_figures)


def _measure_row(model: Any, tokenizer: Any, case: Case, plan: Plan, batch: int, lengths: tuple[int, ...],
                 graphs: bool, on_row: OnRow, first: dict[str, Any] | None = None) -> dict[str, Any]:
    """One row: its bench run, its profile; handed to ``on_row`` and returned."""
    device = next(model.parameters()).device
    length = lengths[0] if lengths else None
    graphed = graphs and device.type == "cuda"  # elsewhere timed eagerly, and the record says why
    energy = case.energy(length, batch) and not graphs
    result = _bench(model, tokenizer, case, plan, batch, lengths, decode=False, energy=energy, graphs=graphed)
    (row,) = result.rows
    with kept_rope_state(model), window_sizes_on_device(model):
        inputs = _inputs(model, tokenizer, case, row, batch)
        profiled = profile_call(partial(prefill, model, inputs, None), device)
    record = _record(case, batch, row, profiled)
    record["graphs"] = graphs
    if graphs and not graphed:
        record["graphs_reason"] = f"CUDA graphs need a CUDA device ({device.type} here): timed eagerly"
    if first is not None:
        record["first"] = first
    on_row(record, result.to_dict())
    return record
