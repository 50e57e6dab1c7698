"""Prefix-state reuse: the layers before POP's skipped block, computed once per prompt and replayed.

The layers before the skipped block see exactly the full model's states, for every configuration: POP changes
nothing there. So once the full model has prefilled a prompt, its input to every layer can be kept, and a POP
prefill of the same prompt with any block ``[s, e)`` can replay layers ``[0, s)`` from them: each such layer
only writes its K/V (its own input norm, K/V projections, key norm and RoPE, applied to the stored input: the
same few percent of a layer that POP already pays for a skipped layer) and hands on the stored input of the
next layer. The block and the layers after it run as usual. Accuracy measurements of many configurations on
the same items (a study) then pay the deep layers only.

A row is identified by its exact inputs (token ids, attention mask and position ids, padding included), so a
replayed row computes exactly what it would have: rows of a batch are independent in a decoder. States are
held in memory up to a byte cap; a prompt not held runs the plain POP prefill. :func:`verify` checks the
replayed path against the plain one on a prompt before a study relies on it.

The full model's greedy *answers* are kept beside the states (:meth:`PrefixStates.record_drafts`, keyed by the
prompt's real tokens, padding stripped): a POP configuration's greedy generation verifies them as drafts,
several tokens per full-depth forward (:mod:`poptune.engine.speculate`), instead of decoding them one by one.

    states = PrefixStates(max_bytes=2 << 30)
    with states.attached(model):
        run_full_model_on(items)        # records every prefill's layer inputs
        with apply_pop(model, PopConfig(skip=6)):
            run_on(items)               # replays layers [0, 12) from them
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from poptune.errors import MeasurementError

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = ["PrefixStates", "attached_states", "verify", "TOLERANCE"]

_ATTR = "_poptune_prefix_states"

#: Largest absolute logit difference allowed between the replayed and the plain POP prefill.
TOLERANCE = 1e-4


def _row_keys(inputs: dict[str, Any]) -> list[bytes] | None:
    """One key per row from the exact inputs, or None when they cannot identify rows (embeddings given)."""
    ids = inputs.get("input_ids")
    if ids is None or inputs.get("inputs_embeds") is not None:
        return None
    mask, positions = inputs.get("attention_mask"), inputs.get("position_ids")
    if mask is not None and (not hasattr(mask, "ndim") or mask.ndim != 2):
        return None  # an already built 4-D mask or a mapping: rows are not identified by it
    keys = []
    for b in range(ids.shape[0]):
        h = hashlib.sha256(ids[b].cpu().numpy().tobytes())
        h.update(b"m" + (mask[b].cpu().numpy().tobytes() if mask is not None else b"-"))
        if positions is not None:
            row = positions[b] if positions.shape[0] == ids.shape[0] else positions[0]
            h.update(b"p" + row.cpu().numpy().tobytes())
        keys.append(h.digest())
    return keys


def _prompt_keys(ids: "torch.Tensor", mask: "torch.Tensor | None") -> list[bytes]:
    """One key per row from its real tokens (padding stripped): a draft serves the prompt in any batch."""
    keys = []
    for b in range(ids.shape[0]):
        row = ids[b] if mask is None else ids[b][mask[b].bool()]
        keys.append(hashlib.sha256(b"d" + row.cpu().numpy().tobytes()).digest())
    return keys


def attached_states(model: "nn.Module") -> "PrefixStates | None":
    """The states attached to ``model`` (:meth:`PrefixStates.attached`), or None."""
    from poptune.engine.pop import decoder_of

    return getattr(decoder_of(model), _ATTR, None)


def lend_whole(model: "nn.Module", cache: Any, chunk: int | None, tokens: int) -> None:
    """Where ``model`` runs without POP (or skip 0) with states attached and has just prefilled a whole prompt of
    ``tokens`` (not chunks of it) into ``cache``, lend that cache to the replays of the batch
    (:meth:`PrefixStates.lend`): a shared trunk's configurations then copy the layers before their blocks' K/V
    instead of recomputing them, for greedy generations (:mod:`poptune.engine.joint`) and scored continuations
    (:mod:`poptune.evaluate.scoring`) alike."""
    from poptune.engine.pop import get_pop_config

    states = attached_states(model)
    config = get_pop_config(model)
    if states is not None and (config is None or config.skip == 0) and (chunk is None or chunk >= tokens):
        states.lend(cache)


class PrefixStates:
    """Layer inputs of prefilled prompts, recorded from the full model and replayed under POP.

    Args:
        max_bytes: Memory the states may take; beyond it the rows recorded first make room for new ones (a
            study's full model records the rows its configurations replay next: the certification's rounds after
            the search's), a row of the batch being recorded never; a batch larger than that is not recorded. The
            rows of a batch recorded whole share one copy of its states (one copy a prefill instead of two: the
            recording of a 512-token batch of 8 went from 0.08-0.20 s to 0.04 s of its 0.9 s prefill on the 2-core
            Xeon), freed with the last of them: while a batch's rows make room one by one, the memory held exceeds
            the count by at most that batch.
    """

    def __init__(self, max_bytes: int = 2 << 30) -> None:
        self.max_bytes = max_bytes
        self._rows: dict[bytes, "torch.Tensor"] = {}  # key -> (L, T, C) inputs of every layer
        self.bytes = 0
        self.replayed = 0
        self.recorded = 0
        self._drafts: dict[bytes, tuple[int, ...]] = {}  # prompt key -> the full model's greedy answer
        self.drafted = 0  # rows generated by verifying proposals (see poptune.engine.speculate)
        self.accepted = 0  # decode steps saved: proposed tokens accepted (per batch position)
        self.fallbacks = 0  # POP generations that ran plainly though drafts were held
        self._last: tuple[bytes, ...] | None = None  # the rows of the last plain prefill recorded
        self._lent: tuple[tuple[bytes, ...], list[Any]] | None = None  # one batch's full-model cache layers
        self.copied = 0  # replayed layers whose K/V were copied from a lent cache

    def __len__(self) -> int:
        return len(self._rows)

    @contextlib.contextmanager
    def attached(self, model: "nn.Module") -> Iterator["PrefixStates"]:
        """Record plain prefills and replay POP prefills of ``model`` while the block runs."""
        from poptune.engine.pop import decoder_of
        from poptune.patching import attribute

        with attribute(decoder_of(model), _ATTR, self):
            yield self

    # ---------------------------------------------------------------------------------------------- recording

    @contextlib.contextmanager
    def recording(self, decoder: Any, inputs: dict[str, Any]) -> Iterator[None]:
        """Within a plain prefill of ``inputs``: keep every layer's input for each row not yet held."""
        keys = _row_keys(inputs)
        self._last = tuple(keys) if keys is not None else None
        if keys is None or all(k in self._rows for k in keys):
            yield
            return
        captured: list["torch.Tensor"] = []

        def hook(module: Any, args: tuple, kwargs: dict) -> None:
            captured.append((args[0] if args else kwargs["hidden_states"]).detach())

        handles = [layer.register_forward_pre_hook(hook, with_kwargs=True) for layer in decoder.layers]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()
        if len(captured) != len(decoder.layers):
            return  # the forward stopped early: keep nothing
        import torch

        stacked = torch.stack(captured, dim=1)  # (B, L, T, C)
        size = stacked[0].numel() * stacked.element_size()  # a row's
        new = [key for key in dict.fromkeys(keys) if key not in self._rows]
        older = [key for key in self._rows if key not in keys]  # oldest first
        while older and self.bytes + size * len(new) > self.max_bytes:
            self.bytes -= self._rows.pop(older.pop(0)).numel() * stacked.element_size()
        if self.bytes + size * len(new) > self.max_bytes:
            return  # the batch alone is beyond the cap: a batch partly held is never replayed
        whole = len(new) == len(keys)  # every row new: each keeps its view of the one copy (freed with the last)
        for key in new:
            row = stacked[keys.index(key)]
            self._rows[key] = row if whole else row.clone()
            self.bytes += size
            self.recorded += 1

    # ---------------------------------------------------------------------------------------------- drafts

    def record_drafts(self, inputs: dict[str, Any], sequences: "torch.Tensor", eos: set[int]) -> None:
        """Keep each row's greedy answer (``sequences`` after the prompt, up to its first ``eos`` token)."""
        ids = inputs["input_ids"]
        for b, key in enumerate(_prompt_keys(ids, inputs.get("attention_mask"))):
            tokens = sequences[b, ids.shape[1]:].tolist()
            stop = next((i for i, t in enumerate(tokens) if t in eos), None)
            answer = tuple(tokens if stop is None else tokens[: stop + 1])
            size = 8 * len(answer)
            if key in self._drafts or self.bytes + size > self.max_bytes:
                continue
            self._drafts[key] = answer
            self.bytes += size

    def drafts(self, inputs: dict[str, Any]) -> list[tuple[int, ...]] | None:
        """The recorded answer of every row of ``inputs``, or None unless all are held."""
        ids = inputs.get("input_ids")
        if ids is None or inputs.get("inputs_embeds") is not None:
            return None
        found = [self._drafts.get(k) for k in _prompt_keys(ids, inputs.get("attention_mask"))]
        held = [d for d in found if d is not None]
        return held if len(held) == len(found) else None

    # ---------------------------------------------------------------------------------------------- lending

    def lend(self, cache: Any) -> None:
        """Let replays of exactly the batch last recorded copy the layers before the block from ``cache``, the
        full model's cache right after that prefill (a whole prompt, not its first chunk), instead of recomputing
        their K/V.

        The layers before the block are the full model's, so their K/V are the full model's, bit for bit. Held for
        one batch (a new loan replaces it); the cache's layers are snapshotted (their tensors shared, never
        written in place by a dynamic cache), so later decoding with ``cache`` does not reach the copies.
        """
        import copy

        from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

        plain = all(type(layer) in (DynamicLayer, DynamicSlidingWindowLayer) for layer in cache.layers)
        self._lent = (self._last, [copy.copy(layer) for layer in cache.layers]) if self._last and plain else None

    # ---------------------------------------------------------------------------------------------- replaying

    @contextlib.contextmanager
    def replaying(self, decoder: Any, inputs: dict[str, Any], start: int) -> Iterator[bool]:
        """Within a POP prefill of ``inputs`` whose block starts at ``start``: replay layers ``[0, start)``.

        Yields whether it replays (every row held); otherwise the prefill runs plainly.
        """
        keys = _row_keys(inputs)
        if start < 1 or keys is None or any(k not in self._rows for k in keys):
            yield False
            return
        import torch

        from poptune.patching import Patch

        if self._lent is not None and self._lent[0] == tuple(keys):
            lent = self._lent[1]
            entry = torch.stack([self._rows[k][start] for k in keys])  # (B, T, C): the block's input
            patches = [Patch(decoder.layers[i], _instead(_copy_forward(i, lent[i], entry if i == start - 1 else None)))
                       for i in range(start)]
            self.copied += start
        else:
            states = torch.stack([self._rows[k][: start + 1] for k in keys], dim=1)  # (start + 1, B, T, C)
            patches = [Patch(decoder.layers[i], _instead(_replay_forward(decoder.layers[i], states[i], states[i + 1])))
                       for i in range(start)]
        try:
            yield True
        finally:
            for patch in reversed(patches):
                patch.undo()
        self.replayed += len(keys)


def _instead(forward: Callable[..., Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A :class:`~poptune.patching.Patch` build that puts ``forward`` in place of the layer's own."""
    return lambda _inner: forward


def _replay_forward(layer: Any, inputs: "torch.Tensor", outputs: "torch.Tensor") -> Any:
    """A layer before the block: write its K/V from its stored input, hand on the stored output."""

    def forward(hidden_states: "torch.Tensor", *, position_embeddings: Any = None, cache: Any = None,
                **kwargs: Any) -> "torch.Tensor":
        from poptune.kv.project import write_prompt_kv

        write_prompt_kv(layer, inputs.to(hidden_states.dtype), position_embeddings, cache)  # (B, T, C)
        return outputs.to(hidden_states.dtype)

    return forward


def _copy_forward(index: int, lent: Any, outputs: "torch.Tensor | None") -> Any:
    """A layer before the block, its K/V lent: its cache layer becomes a copy of the lent one; it hands on the
    block's input (the last such layer) or what it was given (the next layer ignores it too)."""
    import copy

    def forward(hidden_states: "torch.Tensor", *, cache: Any = None, **kwargs: Any) -> "torch.Tensor":
        cache.layers[index] = copy.copy(lent)
        return hidden_states if outputs is None else outputs.to(hidden_states.dtype)

    return forward


def verify(model: "nn.Module", input_ids: "torch.Tensor", config: Any, states: PrefixStates) -> float:
    """The largest absolute difference between replayed and plain POP on ``input_ids``: the prefill logits and
    every layer's cached K/V (what decode attends to), whichever is larger.

    Records the prompt with the full model first if needed.

    Raises:
        MeasurementError: The difference exceeds :data:`TOLERANCE` or the prompt was not replayed.
    """
    import torch

    from poptune.engine.pop import PopConfig, apply_pop

    with torch.inference_mode():
        with states.attached(model), apply_pop(model, PopConfig(skip=0)):
            model(input_ids=input_ids, logits_to_keep=1)
        with apply_pop(model, config):
            plain = model(input_ids=input_ids, logits_to_keep=1, use_cache=True)
            before = states.replayed
            with states.attached(model):
                replayed = model(input_ids=input_ids, logits_to_keep=1, use_cache=True)
    if states.replayed == before:
        raise MeasurementError("prefix-state reuse did not replay the check prompt: refusing to rely on it")
    diffs = [float((plain.logits.float() - replayed.logits.float()).abs().max())]
    for a, b in zip(plain.cache.layers, replayed.cache.layers):
        diffs += [float((a.keys - b.keys).abs().max()), float((a.values - b.values).abs().max())]
    diff = max(diffs)
    if not diff <= TOLERANCE:
        raise MeasurementError(f"prefix-state reuse differs from the plain POP prefill by {diff:.2e} in the logits "
                               f"or the cached K/V (> {TOLERANCE:g}): refusing to rely on it")
    return diff
