"""POP's skipped block within one prefill segment: independent K/V for the pruned tokens, full layers for the rest.

A segment is a forward that adds ``N`` tokens to a cache holding ``past`` tokens (``past = 0`` for a new prompt).
Its first ``P`` tokens are pruned; the other ``N - P`` (the boundary, possibly none) run at full depth. In every
layer of the skipped block, one pass over the segment

1. writes the pruned tokens' K/V as the configuration's K/V source says (:mod:`poptune.kv`; the paper's: through
   the layer's own input norm, K/V projections, key norm and RoPE, applied to the hidden state entering the
   block) and passes their hidden states through unchanged, and
2. runs the whole layer for the boundary tokens, which attend to everything the cache holds by then: the earlier
   segments, the pruned tokens and their own K/V.

The boundary tokens' attention mask is the model's own, sliced (rows: the boundary queries; columns: the keys
the cache returns once their K/V are added), so bidirectional image blocks, padding and sliding windows keep
their exact shape. The masks of the eager and SDPA kernels are 4-D (queries x keys), flash attention's are 2-D
key-padding masks (the kernel aligns causality bottom-right itself); other attention implementations are
refused by name.

A source whose writes leave a cache that plain attention cannot read marks it (:meth:`KVSource.mark
<poptune.kv.source.KVSource.mark>`); the engine then asks that source for the boundary tokens' mask
(:meth:`~poptune.kv.source.KVSource.boundary_mask`) and enters its context around every later forward over the cache
(:func:`cache_context`). The engine knows no source's cache: it asks the source that marked it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from poptune.errors import UnsupportedModelError
from poptune.kv.source import source_of
from poptune.patching import Patch

if TYPE_CHECKING:
    import torch

    from poptune.kv.source import Write

__all__ = ["cache_context", "mask_layout", "skipping"]


def mask_layout(config: Any) -> str:
    """``"4d"`` (eager, SDPA) or ``"2d"`` (flash attention) for the attention implementation of ``config``.

    Raises:
        UnsupportedModelError: An implementation whose masks POP cannot slice (flex attention's block masks,
            kernels that take no mask).
    """
    from transformers import masking_utils

    name = getattr(config, "_attn_implementation", None)
    build = masking_utils.ALL_MASK_ATTENTION_FUNCTIONS.get(name) if name is not None else None
    if build in (masking_utils.sdpa_mask, masking_utils.eager_mask):
        return "4d"
    if build is masking_utils.flash_attention_mask:
        return "2d"
    raise UnsupportedModelError(
        f"POP does not support the attention implementation {name!r}: use eager, sdpa or a flash attention "
        "kernel (2-D masks)"
    )


@contextlib.contextmanager
def skipping(decoder: Any, skipped: Sequence[int], pruned: int, layout: str, write: "Write",
             reuse: bool = False) -> Iterator[None]:
    """Within the block, layers write the first ``pruned`` tokens' K/V only (with ``write``, the K/V source's) and
    run in full for the others.

    With ``reuse`` (no autograd, no caller recording each layer's output), the block hands one (B, N, C) tensor from
    layer to layer and writes each layer's boundary rows into it in place, instead of a new concatenation per layer
    -- unless a hook on a skipped layer could hold its input or output (:func:`_hooked`).
    """
    patches: list[Patch] = []
    carry = _Carry(reuse and not _hooked([decoder.layers[i] for i in skipped]))
    try:
        for i in skipped:
            layer = decoder.layers[i]
            forward = partial(_skipped_layer_forward, layer, pruned=pruned, layout=layout, write=write, carry=carry)
            patches.append(Patch(layer, forward))
        yield
    finally:
        for patch in reversed(patches):
            patch.undo()


def _hooked(layers: Sequence[Any]) -> bool:
    """Whether a forward hook (of these layers, or global) may keep a layer's input or output: then each skipped
    layer hands on a tensor of its own, never one written in place later."""
    from torch.nn.modules import module

    if module._global_forward_hooks or module._global_forward_pre_hooks:
        return True
    return any(layer._forward_hooks or layer._forward_pre_hooks for layer in layers)


@dataclass
class _Carry:
    """What the skipped layers of one segment hand on (the :data:`~poptune.kv.source.Write` contract).

    Attributes:
        reuse: Whether the block may write its own tensor in place (see :func:`skipping`).
        state: The (B, N, C) tensor a skipped layer last handed on, whose first ``pruned`` rows are the state
            ``pruned`` holds (None before the first skipped layer).
        pruned: The view of those rows every writer is handed while they stay the same: one object, so that a
            source may project once for the whole block (:mod:`poptune.kv.block_kv`).
        owned: Whether ``state`` is the block's own tensor, written in place.
    """

    reuse: bool
    state: Any = None
    pruned: Any = None
    owned: bool = False


def _skipped_layer_forward(layer: Any, inner: Any, pruned: int, layout: str, write: "Write",
                           carry: _Carry | None = None) -> Any:
    """One segment through a skipped layer, all its tokens at once; ``inner`` is the layer's own forward.

    Tokens ``[0, pruned)`` pass through unchanged and write their K/V with ``write`` (POP's independent K/V, as
    the K/V source says). Tokens ``[pruned, N)`` -- the boundary -- run the whole layer, attending to those
    K/V and to their own: exactly what a separate boundary pass over the cache would compute, without paying
    a second forward over the model.
    """
    carry = _Carry(False) if carry is None else carry

    def forward(
        hidden_states: "torch.Tensor",  # (B, N, C)
        *,
        attention_mask: Any = None,
        position_embeddings: Any = None,
        cache: Any = None,
        **kwargs: Any,
    ) -> "torch.Tensor":
        import torch

        n = hidden_states.shape[1]
        # The model built the mask over the keys the cache returned before this layer wrote anything.
        _, mask_offset = cache.get_mask_sizes(n, layer.self_attn.layer_idx)
        cos, sin = position_embeddings  # (B, N, D) each
        if hidden_states is not carry.state:  # not what the previous skipped layer handed on: another state
            carry.state, carry.pruned, carry.owned = hidden_states, hidden_states[:, :pruned], False
        write(layer, carry.pruned, (cos[:, :pruned], sin[:, :pruned]), cache)
        if pruned == n:
            return hidden_states
        position_ids = kwargs.pop("position_ids", None)
        if isinstance(position_ids, torch.Tensor):
            kwargs["position_ids"] = position_ids[..., pruned:]
        sliced = partial(_boundary_mask, attention_mask, cache, layer, (pruned, n), mask_offset, layout, cos.device)
        shaped_by = source_of(cache)  # the source that left the cache in its own shape, if one did
        mask = sliced() if shaped_by is None else shaped_by.boundary_mask(
            layer, cache, attention_mask, (pruned, n), mask_offset, cos.device, sliced)
        boundary = inner(
            hidden_states[:, pruned:],  # (B, W, C)
            attention_mask=mask,
            position_embeddings=(cos[:, pruned:], sin[:, pruned:]),
            cache=cache,
            **kwargs,
        )
        if carry.owned:  # the block's own tensor: only its boundary rows change
            hidden_states[:, pruned:] = boundary
            return hidden_states
        out = torch.cat([hidden_states[:, :pruned], boundary], dim=1)  # the pruned rows: copies of carry.pruned
        carry.state, carry.owned = out, carry.reuse
        return out

    return forward


def _boundary_mask(mask: Any, cache: Any, layer: Any, queries: tuple[int, int], mask_offset: int,
                   layout: str, device: Any) -> Any:
    """The attention mask of the boundary queries ``[start, stop)`` of the segment over the keys the cache will
    return for this layer once their own K/V are added.

    ``mask`` is the model's for the whole segment: (B, 1, N, KV) with its first column at absolute key position
    ``mask_offset`` (4-D), or (B, KV) aligned on the last key (2-D). The boundary needs the rows ``[start, stop)``
    and the columns the cache holds now: all keys for full attention, the last ``window - 1`` earlier ones and the
    boundary for a sliding-window layer (a source whose cache holds other columns says its own mask,
    :meth:`~poptune.kv.source.KVSource.boundary_mask`). Without a mask (SDPA's causal
    shortcut: no padding) one query may see every key; a window of several queries needs an explicit
    bottom-right-aligned causal mask (a flash kernel aligns it so itself).
    """
    import torch

    start, stop = queries
    width = stop - start
    kv_length, kv_offset = cache.get_mask_sizes(width, layer.self_attn.layer_idx)
    if layout == "2d":
        return mask[:, -kv_length:] if isinstance(mask, torch.Tensor) else None  # (B, KV)
    if isinstance(mask, torch.Tensor):
        first = kv_offset - mask_offset
        return mask[..., start:stop, first : first + kv_length]  # (B, 1, W, KV)
    if mask is not None:
        raise UnsupportedModelError(f"POP cannot slice an attention mask of type {type(mask).__name__}")
    if width == 1:
        return None
    query = torch.arange(kv_length - width, kv_length, device=device).unsqueeze(1)  # (W, 1): the last W keys
    key = torch.arange(kv_length, device=device).unsqueeze(0)  # (1, KV)
    allowed = key <= query
    window = getattr(layer.self_attn, "sliding_window", None)
    if window:
        allowed &= query - key < window
    return allowed[None, None]  # (1, 1, W, KV)


@contextlib.contextmanager
def cache_context(decoder: Any, cache: Any, exclude: Sequence[int] = ()) -> Iterator[None]:
    """Within, ``decoder``'s layers but ``exclude`` attend over ``cache`` as the K/V source that marked it says
    (:meth:`~poptune.kv.source.KVSource.cache_context`); nothing to do (and no cost but one attribute lookup) for a
    cache no source marked.

    Raises:
        UnsupportedModelError: a cache its source cannot have read under the model's attention implementation.
    """
    shaped_by = source_of(cache)
    if shaped_by is None:
        yield
        return
    with shaped_by.cache_context(decoder, cache, mask_layout(decoder.config), exclude):
        yield
