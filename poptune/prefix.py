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
prompt's real tokens, padding stripped): a POP configuration's generation takes them as drafts that the full
model verifies in one forward (:mod:`poptune.speculate`), so a study pays its decode steps only where POP's
answer departs from the full model's.

    states = PrefixStates(max_bytes=2 << 30)
    with states.attached(model):
        run_full_model_on(items)        # records every prefill's layer inputs
        with apply_pop(model, PopConfig(skip=6)):
            run_on(items)               # replays layers [0, 12) from them
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
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
    from poptune.engine import decoder_of

    return getattr(decoder_of(model), _ATTR, None)


class PrefixStates:
    """Layer inputs of prefilled prompts, recorded from the full model and replayed under POP.

    Args:
        max_bytes: Memory the states may take; beyond it new prompts are not recorded.
    """

    def __init__(self, max_bytes: int = 2 << 30) -> None:
        self.max_bytes = max_bytes
        self._rows: dict[bytes, "torch.Tensor"] = {}  # key -> (L, T, C) inputs of every layer
        self.bytes = 0
        self.replayed = 0
        self.recorded = 0
        self._drafts: dict[bytes, tuple[int, ...]] = {}  # prompt key -> the full model's greedy answer
        self.drafted = 0  # rows generated from a verified draft (see poptune.speculate)
        self.accepted = 0  # tokens of those rows taken from drafts
        self.fallbacks = 0  # POP generations that ran plainly though drafts were held

    def __len__(self) -> int:
        return len(self._rows)

    @contextlib.contextmanager
    def attached(self, model: "nn.Module") -> Iterator["PrefixStates"]:
        """Record plain prefills and replay POP prefills of ``model`` while the block runs."""
        from poptune.engine import decoder_of

        decoder = decoder_of(model)
        previous = getattr(decoder, _ATTR, None)
        setattr(decoder, _ATTR, self)
        try:
            yield self
        finally:
            if previous is None:
                delattr(decoder, _ATTR)
            else:
                setattr(decoder, _ATTR, previous)

    # ---------------------------------------------------------------------------------------------- recording

    @contextlib.contextmanager
    def recording(self, decoder: "nn.Module", inputs: dict[str, Any]) -> Iterator[None]:
        """Within a plain prefill of ``inputs``: keep every layer's input for each row not yet held."""
        keys = _row_keys(inputs)
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
        for b, key in enumerate(keys):
            size = stacked[b].numel() * stacked.element_size()
            if key in self._rows or self.bytes + size > self.max_bytes:
                continue
            self._rows[key] = stacked[b].clone()
            self.bytes += size
            self.recorded += 1

    # ---------------------------------------------------------------------------------------------- drafts

    def record_drafts(self, inputs: dict[str, Any], sequences: "torch.Tensor", eos: set[int]) -> None:
        """Keep each row's greedy answer (``sequences`` after the prompt, up to its first ``eos`` token)."""
        ids = inputs["input_ids"]
        for b, key in enumerate(_prompt_keys(ids, inputs.get("attention_mask"))):
            answer = sequences[b, ids.shape[1]:].tolist()
            stop = next((i for i, t in enumerate(answer) if t in eos), None)
            answer = tuple(answer if stop is None else answer[: stop + 1])
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
        return None if any(d is None for d in found) else found  # type: ignore[return-value]

    # ---------------------------------------------------------------------------------------------- replaying

    @contextlib.contextmanager
    def replaying(self, decoder: "nn.Module", inputs: dict[str, Any], start: int) -> Iterator[bool]:
        """Within a POP prefill of ``inputs`` whose block starts at ``start``: replay layers ``[0, start)``.

        Yields whether it replays (every row held); otherwise the prefill runs plainly.
        """
        keys = _row_keys(inputs)
        if start < 1 or keys is None or any(k not in self._rows for k in keys):
            yield False
            return
        import torch

        from poptune.patching import Patch

        states = torch.stack([self._rows[k][: start + 1] for k in keys], dim=1)  # (start + 1, B, T, C)
        patches = [Patch(decoder.layers[i], lambda _, i=i: _replay_forward(decoder.layers[i], states[i], states[i + 1]))
                   for i in range(start)]
        try:
            yield True
        finally:
            for patch in reversed(patches):
                patch.undo()
        self.replayed += len(keys)


def _replay_forward(layer: "nn.Module", inputs: "torch.Tensor", outputs: "torch.Tensor") -> Any:
    """A layer before the block: write its K/V from its stored input, hand on the stored output."""

    def forward(hidden_states: "torch.Tensor", *, position_embeddings: Any = None, cache: Any = None,
                **kwargs: Any) -> "torch.Tensor":
        from poptune.block import write_prompt_kv

        write_prompt_kv(layer, inputs.to(hidden_states.dtype), position_embeddings, cache)  # (B, T, C)
        return outputs.to(hidden_states.dtype)

    return forward


def verify(model: "nn.Module", input_ids: "torch.Tensor", config: Any, states: PrefixStates) -> float:
    """The largest absolute difference between replayed and plain POP on ``input_ids``: the prefill logits and
    every layer's cached K/V (what decode attends to), whichever is larger.

    Records the prompt with the full model first if needed.

    Raises:
        MeasurementError: The difference exceeds :data:`TOLERANCE` or the prompt was not replayed.
    """
    import torch

    from poptune.engine import PopConfig, apply_pop

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
