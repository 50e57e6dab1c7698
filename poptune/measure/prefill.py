"""What is timed: one prefill up to the first token's logits, and greedy decode steps from its cache."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from poptune.engine import PopConfig, apply_pop, remove_pop
from poptune.engine.segments import prefill_prompt

__all__ = ["cache_bytes", "prefill", "decode", "time_prefill_pair"]


def prefill(model: Any, inputs: Mapping[str, torch.Tensor], config: PopConfig | None, chunk: int | None = None) -> Any:
    """One prefill of ``inputs``, with POP if ``config`` is given, the plain model otherwise; in chunks of
    ``chunk`` tokens if given (see :mod:`poptune.engine.segments`).

    POP is applied for the call and removed after, so calls for several configurations can be interleaved
    on one model. Only the last position's logits are computed, as ``generate`` does, so the full model is
    not charged for logits POP never produces. Returns the model output (``logits`` (B, 1, V), ``cache``).
    """
    if config is not None:
        apply_pop(model, config)
    try:
        return prefill_prompt(model, inputs, chunk=chunk)
    finally:
        if config is not None:
            remove_pop(model)


def cache_bytes(cache: Any, batch: int = 1) -> int:
    """Bytes the K/V cache ``cache`` holds per request of its ``batch``: the ``nbytes`` of its tensors, each once.

    Every tensor a cache layer holds is counted (keys and values, and whatever else a layer keeps: a sliding
    window's counters, a quantised layer's scales); a tensor several layers share (a K/V source that reuses one
    layer's cache for others) counts once, by its data pointer. A tensor whose leading dimension is the batch is
    shared among its requests; any other (a layer's counters) is every request's. A legacy cache (tuples of
    tensors) is walked the same way.
    """
    tensors: list[torch.Tensor] = []

    def walk(item: Any) -> None:
        if isinstance(item, torch.Tensor):
            tensors.append(item)
        elif isinstance(item, (tuple, list)):
            for part in item:
                walk(part)
        elif hasattr(item, "layers"):
            walk(list(item.layers))
        elif hasattr(item, "__dict__"):
            walk([v for v in vars(item).values() if isinstance(v, (torch.Tensor, tuple, list))])

    walk(cache)
    held: dict[int, int] = {}
    for tensor in tensors:
        key = tensor.data_ptr() or id(tensor)  # an empty tensor has no data: it counts 0 bytes, under its own key
        size = tensor.nbytes // batch if tensor.dim() and tensor.shape[0] == batch else tensor.nbytes
        held[key] = max(held.get(key, 0), size)
    return sum(held.values())


def decode(model: Any, output: Any, prompt: Mapping[str, torch.Tensor], steps: int) -> None:
    """``steps`` greedy decode forwards of the unmodified model from the cache of a prefill ``output``.

    ``prompt`` is what was prefilled (its attention mask grows by one per step; an image prompt sets
    Qwen3-VL's decode positions, see :func:`poptune.models.vision.decode_position_ids`). The cache is decoded as
    the K/V source that wrote it says (:func:`poptune.engine.block.cache_context`; nothing for a plain cache).
    """
    from poptune.engine import decoder_of
    from poptune.engine.block import cache_context
    from poptune.models.vision import decode_position_ids

    cache = output.cache
    token = output.logits[:, -1].argmax(-1, keepdim=True)  # (B, 1)
    mask = prompt["attention_mask"]
    with cache_context(decoder_of(model), cache):
        for _ in range(steps):
            mask = torch.cat([mask, torch.ones_like(token)], dim=1)  # (B, past + 1)
            positions = decode_position_ids(model, dict(prompt), mask)
            out = model(input_ids=token, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True,
                        logits_to_keep=1)
            token = out.logits[:, -1].argmax(-1, keepdim=True)


def time_prefill_pair(model: Any, inputs: Mapping[str, torch.Tensor], config: PopConfig, chunk: int | None = None,
                      *, policy: Any = None) -> Any:
    """Time to first token of ``config`` against the full model on ``inputs``, as pairs (a = POP, b = full).

    Timed like the generation it stands for (no autograd graph during the prefill), by the one timer; ``policy``
    defaults to a short demo's (1 warm-up, at least 5 pairs and 0.5 s). Returns the
    :class:`~poptune.measure.records.PairRecord`.
    """
    from poptune.measure.timer import RepeatPolicy, Timer, measure_pair

    with torch.inference_mode():
        return measure_pair(
            lambda: prefill(model, inputs, config, chunk),
            lambda: prefill(model, inputs, None, chunk),
            timer=Timer(model.device),
            policy=policy or RepeatPolicy(warmup=1, min_repeats=5, min_seconds=0.5),
        )
