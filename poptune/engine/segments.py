"""Prompts fed in segments: chunked prefill and conversation turns on top of an existing cache.

A *segment* is one forward that adds several tokens to a cache. Under POP its tokens are pruned in the skipped
block, except the boundary tokens of the segment that ends the prompt:

- **Chunks.** A long prompt fed in chunks (to bound the memory and latency of one step, as serving engines do)
  is one prompt: the chunks before the last have no boundary tokens, and the last one takes the boundary rule.
  :func:`chunk_bounds` makes the last chunk hold the whole boundary window, so a chunked prompt prunes exactly
  the tokens the whole prompt does and yields the same cache and first-token logits (to float rounding).
- **Turns.** A later turn of a conversation is a prompt on top of the cache of the earlier turns (their prompts
  and answers): everything not yet in the cache up to the next answer -- the last answer token, which
  generation never fed back, and the new question -- is prefilled with POP, its boundary rule included. Decode
  stays the full model.

The engine tells a prompt from decode by the token count (see :func:`poptune.engine.stage`); the functions
here declare each chunk's stage explicitly.

    out = prefill_prompt(model, inputs, chunk=512)        # first-token logits and the cache
    ids = generate(model, inputs, chunk=512, max_new_tokens=32)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from poptune.engine.pop import get_pop_config, stage
from poptune.errors import ConfigError, InputError

__all__ = ["chunk_bounds", "prefill_prompt", "generate"]

_CHUNKABLE = frozenset({"input_ids", "attention_mask", "position_ids"})


def chunk_bounds(length: int, chunk: int | None, boundary_width: int = 1) -> list[tuple[int, int]]:
    """``(start, stop)`` of each chunk of a ``length``-token prompt fed ``chunk`` tokens at a time.

    The last chunk holds at least the boundary window and two tokens (one new token over a cache is decode), so
    it may start before a multiple of ``chunk``: ``chunk_bounds(13, 4) == [(0, 4), (4, 8), (8, 11), (11, 13)]``.
    ``chunk=None`` (or one at least as long as the prompt) is the whole prompt at once.
    """
    if chunk is not None and (isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1):
        raise ConfigError(f"`prefill_chunk` must be an integer >= 1, got {chunk!r}")
    if chunk is None or chunk >= length:
        return [(0, length)]
    last = min((length - 1) // chunk * chunk, length - max(boundary_width, 2))
    if last <= 0:
        return [(0, length)]
    return [(a, min(a + chunk, last)) for a in range(0, last, chunk)] + [(last, length)]


def _extra_keys(inputs: Mapping[str, Any]) -> list[str]:
    return sorted(k for k, v in inputs.items() if k not in _CHUNKABLE and v is not None)


def _bounds(model: Any, inputs: Mapping[str, Any], chunk: int | None) -> list[tuple[int, int]]:
    config = get_pop_config(model)
    bounds = chunk_bounds(inputs["input_ids"].shape[1], chunk, config.boundary_width if config else 1)
    extra = _extra_keys(inputs)
    if len(bounds) > 1 and extra:
        raise InputError(f"chunked prefill takes text prompts only (input_ids, attention_mask, position_ids), got "
                         f"{', '.join(extra)}: feed image prompts whole")
    return bounds


def _new_cache(model: Any) -> Any:
    from transformers import DynamicCache

    return DynamicCache(config=model.config.get_text_config(decoder=True))


def prefill_prompt(model: Any, inputs: Mapping[str, Any], *, chunk: int | None = None, cache: Any = None) -> Any:
    """Prefill a prompt, in chunks of ``chunk`` tokens if given; with POP if the model has it applied.

    Args:
        model: A causal LM (with or without POP).
        inputs: ``input_ids`` (B, N), and optionally ``attention_mask`` (B, past + N) and ``position_ids``
            (default: text positions continuing from the cache); image inputs only when fed whole.
        chunk: Tokens per chunk (None: the whole prompt in one forward).
        cache: The cache of earlier turns to prefill on top of (None: a new prompt).

    Returns:
        The last forward's output: ``logits`` of the prompt's last position (B, 1, V) and the ``cache``.
    """
    from poptune.models.vision import decode_position_ids

    bounds = _bounds(model, inputs, chunk)
    if _extra_keys(inputs):  # an image prompt, whole: the model computes its positions itself
        with stage(model, "prompt"):
            return model(**inputs, cache=cache, use_cache=True, logits_to_keep=1)
    import torch

    ids = inputs["input_ids"]
    n = ids.shape[1]
    past = cache.get_seq_length() if cache is not None else 0
    mask = inputs.get("attention_mask")
    if mask is None and (past or len(bounds) > 1):
        mask = torch.ones(ids.shape[0], past + n, dtype=torch.long, device=ids.device)
    positions = inputs.get("position_ids")
    if len(bounds) > 1 and cache is None:
        cache = _new_cache(model)
    for i, (start, stop) in enumerate(bounds):
        part_mask = mask[:, : mask.shape[1] - n + stop] if mask is not None else None  # (B, past + stop)
        # Text positions continue from the cache; given explicitly, as Qwen3-VL would otherwise add the mRoPE
        # offset its last image prompt left (a conversation that began with an image passes its own).
        part_positions = positions[..., start:stop] if positions is not None else \
            decode_position_ids(model, {}, part_mask, new=stop - start) if part_mask is not None else None
        with stage(model, "prompt" if i == len(bounds) - 1 else "chunk"):
            out = model(input_ids=ids[:, start:stop], attention_mask=part_mask, position_ids=part_positions,
                        cache=cache, use_cache=True, logits_to_keep=1)
        cache = out.cache
    return out


def generate(model: Any, inputs: Mapping[str, Any], *, chunk: int | None = None, **kwargs: Any) -> Any:
    """``model.generate(**inputs, **kwargs)`` with the prompt prefilled in chunks of ``chunk`` tokens.

    The chunks before the last are fed here (no boundary); ``generate`` then prefills the last one on top of
    their cache -- a prompt segment, with the boundary rule -- and decodes. Pass ``cache=`` (in ``kwargs``) to
    continue a conversation: ``inputs`` then hold the whole conversation so far.
    """
    import torch

    bounds = _bounds(model, inputs, chunk)
    cache = kwargs.pop("cache", None)
    past = cache.get_seq_length() if cache is not None else 0
    if len(bounds) == 1 or past:
        if len(bounds) > 1:
            raise ConfigError("chunked prefill of a later turn: use prefill_prompt, or generate without chunks")
        return model.generate(**inputs, cache=cache, **kwargs)
    ids = inputs["input_ids"]
    mask = inputs.get("attention_mask")
    if mask is None:
        mask = torch.ones_like(ids)
    # generate's own positions for this prompt (Qwen3-VL: also its mRoPE offset), so the chunks agree with the rest.
    positions = model._prepare_position_ids_for_generation(ids, {"attention_mask": mask})
    cache = _new_cache(model)
    with stage(model, "chunk"), torch.no_grad():
        for start, stop in bounds[:-1]:
            model(input_ids=ids[:, start:stop], attention_mask=mask[:, :stop], position_ids=positions[..., start:stop],
                  cache=cache, use_cache=True, logits_to_keep=1)
    return model.generate(**inputs, cache=cache, **kwargs)
