"""The dry run: every stage's code path on the CPU, under the full plan's model names, with stand-in models.

``poptune gpu-check --dry-run`` runs what the device run runs, in the same order and through the same calls --
the registry's look-ups for ``llama-3.1``, ``gemma-3-12b`` and ``qwen3-vl`` (their tokenizers included), the
bench runs with their telemetry, energy and profiler code, the scoring -- so that a missing package or a broken
import on any stage's path fails here, in seconds, not on a lent GPU. What it changes, and only inside
:func:`stand_ins`:

- **Models.** Each full-size config is built at stand-in widths (:data:`STAND_IN_TEXT`, :data:`STAND_IN_VISION`)
  with everything else kept: the architecture and its classes, the layer count (so the plan's skips are valid),
  the vocabulary, the layer types and windows, the image-token ids.
- **Rows.** Tiny prompts (:func:`dry_plan`: 8, 16, 24... tokens for the plan's lengths, a 64x64 image), one
  timed pair policy, on the CPU (no energy blocks or telemetry there; their code says why).
- **Scores.** The scoring model's weights are looked up under its real name (the cache folder, nothing built);
  the scores themselves come from ``tiny-gemma3``.

Its figures mean nothing: the report says DRY RUN and fails only on stages that broke.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from poptune.gpucheck.plan import Case, Plan
from poptune.measure import RepeatPolicy
from poptune.models import configs
from poptune.models.vision import ImageSize

__all__ = ["STAND_IN_TEXT", "STAND_IN_VISION", "dry_plan", "shrink", "stand_ins"]

#: The text stack's widths in a stand-in (the tiny models' widths).
STAND_IN_TEXT = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=16)
#: A vision tower's widths in a stand-in.
STAND_IN_VISION = dict(hidden_size=32, intermediate_size=64)


def shrink(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` at stand-in widths; depth, vocabulary, layer types, windows and token ids kept."""
    config = copy.deepcopy(config)
    text = config.get("text_config", config)
    text.update(STAND_IN_TEXT)
    if "query_pre_attn_scalar" in text:
        text["query_pre_attn_scalar"] = STAND_IN_TEXT["head_dim"]
    rope = text.get("rope_parameters") or {}
    if "mrope_section" in rope:  # sums to half the head dimension
        rope["mrope_section"] = [4, 2, 2]
    vision = config.get("vision_config")
    if vision:
        vision.update(STAND_IN_VISION)
        for heads in ("num_heads", "num_attention_heads"):
            if heads in vision:
                vision[heads] = 2
        if "out_hidden_size" in vision:
            vision["out_hidden_size"] = STAND_IN_TEXT["hidden_size"]
    return config


@contextlib.contextmanager
def stand_ins() -> Iterator[None]:
    """While the block runs, the registry builds every full-size config at stand-in widths (:func:`shrink`)."""
    real = configs.full_config

    def shrunk(name: str) -> dict[str, Any] | None:
        config = real(name)
        return None if config is None else shrink(config)

    configs.full_config = shrunk
    try:
        yield
    finally:
        configs.full_config = real


def _dry_case(case: Case) -> Case:
    lengths = {n: 8 * (i + 1) for i, n in enumerate(case.lengths)}
    return replace(case, lengths=tuple(lengths.values()), max_tokens=None,
                   batched=None if case.batched is None else tuple(lengths[n] for n in case.batched),
                   image=None if case.image is None else ImageSize(64, 64),
                   energy_at=None if case.energy_at is None else tuple((lengths[n], b) for n, b in case.energy_at),
                   graphs_at=tuple((None if n is None else lengths[n], b) for n, b in case.graphs_at))


def dry_plan(plan: Plan) -> Plan:
    """``plan`` with the same model names and skips, tiny prompts and one timed pair per row (a stand-in run)."""
    return replace(plan, cases=tuple(_dry_case(c) for c in plan.cases), null_case=_dry_case(plan.null_case),
                   decode_tokens=2, policy=RepeatPolicy(warmup=0, min_repeats=1, min_seconds=0.0, max_repeats=1),
                   scores_model="tiny-gemma3", scores_skip=2, scores_items=4, scores_context=32,
                   scores_continuation=4)
