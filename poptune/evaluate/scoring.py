"""Stage-aware likelihood scoring: the context is a prefill, the continuation is scored as decode sees it.

For each context, one prefill (POP, if the model has it applied, with its boundary rule) yields the cache and
the first continuation token's logits; every continuation of that context is then scored at full depth from a
copy of that cache, all continuations in one batched forward. Multiple-choice items therefore share one
prefill per question, and the LM head runs only where a score is read: the last context position and the
continuation positions.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from poptune.engine import stage
from poptune.engine.greedy import greedy_pick
from poptune.engine.prefix import lend_whole
from poptune.engine.segments import prefill_prompt
from poptune.models.vision import decode_position_ids

__all__ = ["score_continuations", "continuation_logprobs", "iter_logprobs"]

# Continuation positions per batched forward; bounds the (rows, positions, vocab) logits tensor.
_POSITIONS_PER_CHUNK = 256


def _left_pad(rows: Sequence[Sequence[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros((len(rows), width), dtype=torch.long, device=device)
    for i, row in enumerate(rows):
        if row:
            ids[i, width - len(row) :] = torch.tensor(row, dtype=torch.long, device=device)
            mask[i, width - len(row) :] = 1
    return ids, mask  # (B, n), (B, n)


def _take_rows(cache: Any, index: torch.Tensor) -> Any:
    """A new cache holding rows ``index`` (repeats allowed) of ``cache``; ``cache`` itself is left intact. A layer
    keeping more than keys and values per row (a compact one's columns, :mod:`poptune.kv.compact`) names them in
    ``row_fields``."""
    taken = copy.copy(cache)
    taken.layers = []
    for layer in cache.layers:
        new = copy.copy(layer)
        for name in getattr(layer, "row_fields", ("keys", "values")):
            setattr(new, name, getattr(layer, name).index_select(0, index))
        taken.layers.append(new)
    return taken


@torch.inference_mode()  # torch wraps each step of a generator in the mode, not the consumer's code
def iter_logprobs(
    model: Any,
    contexts: Sequence[Sequence[int]],
    continuations: Sequence[Sequence[int]],
    *,
    pad_id: int,
    prefill_chunk: int | None = None,
) -> Iterator[tuple[int, torch.Tensor]]:
    """Yield ``(i, logp)`` for each pair i as soon as it is scored (pairs come out of order).

    ``logp`` is a float32 tensor (len(continuation), V): row j is the distribution the model gives
    continuation token j after the context and continuation[:j]. Equal contexts are prefilled once, in one
    left-padded batch (in chunks of ``prefill_chunk`` tokens if given); the continuations are decode, at full
    depth. Consume each tensor before asking for the next chunk to keep memory bounded.
    """
    unique: dict[tuple[int, ...], int] = {}
    for ctx in contexts:
        unique.setdefault(tuple(ctx), len(unique))
    keys = list(unique)
    device = next(model.parameters()).device
    ids, mask = _left_pad(keys, pad_id, device)
    out = prefill_prompt(model, {"input_ids": ids, "attention_mask": mask}, chunk=prefill_chunk)
    lend_whole(model, out.cache, prefill_chunk, ids.shape[1])  # a trunk's configurations copy its layers' K/V
    first = torch.log_softmax(out.logits[:, -1].float(), dim=-1)  # (B, V)
    longer = []
    for i, (ctx, cont) in enumerate(zip(contexts, continuations)):
        if len(cont) == 1:
            yield i, first[unique[tuple(ctx)]].unsqueeze(0)
        else:
            longer.append(i)
    # Longest first, so each chunk pads little.
    longer.sort(key=lambda i: -len(continuations[i]))
    start = 0
    while start < len(longer):
        width = len(continuations[longer[start]]) - 1
        rows = max(1, _POSITIONS_PER_CHUNK // width)
        chunk = longer[start : start + rows]
        start += rows
        index = torch.tensor([unique[tuple(contexts[i])] for i in chunk], device=device)
        cache = _take_rows(out.cache, index)
        cont_ids = torch.full((len(chunk), width), pad_id, dtype=torch.long, device=device)
        cont_mask = torch.zeros((len(chunk), width), dtype=torch.long, device=device)
        for r, i in enumerate(chunk):
            tail = continuations[i][:-1]
            cont_ids[r, : len(tail)] = torch.tensor(tail, dtype=torch.long, device=device)
            cont_mask[r, : len(tail)] = 1  # right padding: real tokens never attend to it
        full_mask = torch.cat([mask.index_select(0, index), cont_mask], dim=1)  # (rows, n + width)
        # Explicit positions: Qwen3-VL would otherwise apply the mRoPE offset an earlier image prompt left.
        positions = decode_position_ids(model, {}, full_mask, new=width)
        with stage(model, "decode"):
            logits = model(input_ids=cont_ids, attention_mask=full_mask, position_ids=positions, cache=cache,
                           use_cache=True).logits  # (rows, width, V)
        logp = torch.log_softmax(logits.float(), dim=-1)
        for r, i in enumerate(chunk):
            n = len(continuations[i])
            yield i, torch.cat([first[index[r]].unsqueeze(0), logp[r, : n - 1]], dim=0)  # (n, V)


def continuation_logprobs(
    model: Any,
    contexts: Sequence[Sequence[int]],
    continuations: Sequence[Sequence[int]],
    *,
    pad_id: int,
    prefill_chunk: int | None = None,
) -> list[torch.Tensor]:
    """:func:`iter_logprobs` collected in request order (holds every (n, V) tensor: keep batches small)."""
    results: list[torch.Tensor | None] = [None] * len(contexts)
    for i, logp in iter_logprobs(model, contexts, continuations, pad_id=pad_id, prefill_chunk=prefill_chunk):
        results[i] = logp
    return results  # type: ignore[return-value]  # every slot filled: iter_logprobs yields each index once


def score_continuations(
    model: Any,
    contexts: Sequence[Sequence[int]],
    continuations: Sequence[Sequence[int]],
    *,
    pad_id: int,
    prefill_chunk: int | None = None,
) -> list[tuple[float, bool]]:
    """lm-eval's ``(log-likelihood, is_greedy)`` of each continuation given its context.

    Args:
        model: A causal LM, with or without POP applied (POP affects the context prefill only).
        contexts: Token ids of each context (non-empty).
        continuations: Token ids of each continuation (non-empty).
        pad_id: Padding token id.
        prefill_chunk: Prefill the contexts in chunks of this many tokens (None: whole).
    """
    scored: list[tuple[float, bool] | None] = [None] * len(contexts)
    for i, logp in iter_logprobs(model, contexts, continuations, pad_id=pad_id, prefill_chunk=prefill_chunk):
        target = torch.tensor(continuations[i], device=logp.device)
        picked = logp.gather(1, target.unsqueeze(1)).squeeze(1)
        scored[i] = (float(picked.sum()), bool((greedy_pick(logp) == target).all()))
    return scored  # type: ignore[return-value]  # every slot filled: iter_logprobs yields each index once
