"""POP's skipped block within one prefill segment: independent K/V for the pruned tokens, full layers for the rest.

A segment is a forward that adds ``N`` tokens to a cache holding ``past`` tokens (``past = 0`` for a new prompt).
Its first ``P`` tokens are pruned; the other ``N - P`` (the boundary, possibly none) run at full depth. In every
layer of the skipped block, one pass over the segment

1. writes the K/V of the pruned tokens through the layer's own input norm, K/V projections, key norm and RoPE,
   applied to the hidden state entering the block, and passes their hidden states through unchanged, and
2. runs the whole layer for the boundary tokens, which attend to everything the cache holds by then: the earlier
   segments, the pruned tokens and their own K/V.

The boundary tokens' attention mask is the model's own, sliced (rows: the boundary queries; columns: the keys
the cache returns once their K/V are added), so bidirectional image blocks, padding and sliding windows keep
their exact shape. The masks of the eager and SDPA kernels are 4-D (queries x keys), flash attention's are 2-D
key-padding masks (the kernel aligns causality bottom-right itself); other attention implementations are
refused by name.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from .errors import UnsupportedModelError
from .patching import Patch

if TYPE_CHECKING:
    import torch
    from torch import nn

    from .kvmaps import KVMaps, LayerMaps

__all__ = ["mask_layout", "skipping", "write_prompt_kv"]


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
def skipping(decoder: "nn.Module", skipped: Sequence[int], pruned: int, layout: str,
             maps: "KVMaps | None" = None) -> Iterator[None]:
    """Within the block, layers write the first ``pruned`` tokens' K/V only and run in full for the others.

    With ``maps`` (calibrated K/V, see :mod:`poptune.kvmaps`), a layer it holds writes those K/V through its
    fitted projections instead of its own.
    """
    patches: list[Patch] = []
    try:
        for i in skipped:
            layer = decoder.layers[i]
            fitted = maps.layer(i) if maps is not None else None
            build = (lambda inner, layer=layer, fitted=fitted:
                     _skipped_layer_forward(layer, inner, pruned, layout, fitted))
            patches.append(Patch(layer, build))
        yield
    finally:
        for patch in reversed(patches):
            patch.undo()


def _skipped_layer_forward(layer: "nn.Module", inner: Any, pruned: int, layout: str,
                           fitted: "LayerMaps | None") -> Any:
    """One segment through a skipped layer, all its tokens at once; ``inner`` is the layer's own forward.

    Tokens ``[0, pruned)`` pass through unchanged and write their K/V through the layer's own projections
    (POP's independent K/V). Tokens ``[pruned, N)`` -- the boundary -- run the whole layer, attending to those
    K/V and to their own: exactly what a separate boundary pass over the cache would compute, without paying
    a second forward over the model.
    """

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
        write_prompt_kv(layer, hidden_states[:, :pruned], (cos[:, :pruned], sin[:, :pruned]), cache, fitted)
        if pruned == n:
            return hidden_states
        position_ids = kwargs.pop("position_ids", None)
        if isinstance(position_ids, torch.Tensor):
            kwargs["position_ids"] = position_ids[..., pruned:]
        boundary = inner(
            hidden_states[:, pruned:],  # (B, W, C)
            attention_mask=_boundary_mask(attention_mask, cache, layer, (pruned, n), mask_offset, layout, cos.device),
            position_embeddings=(cos[:, pruned:], sin[:, pruned:]),
            cache=cache,
            **kwargs,
        )
        return torch.cat([hidden_states[:, :pruned], boundary], dim=1)

    return forward


def _boundary_mask(mask: Any, cache: Any, layer: "nn.Module", queries: tuple[int, int], mask_offset: int,
                   layout: str, device: Any) -> Any:
    """The attention mask of the boundary queries ``[start, stop)`` of the segment over the keys the cache will
    return for this layer once their own K/V are added.

    ``mask`` is the model's for the whole segment: (B, 1, N, KV) with its first column at absolute key position
    ``mask_offset`` (4-D), or (B, KV) aligned on the last key (2-D). The boundary needs the rows ``[start, stop)``
    and the columns the cache holds now: all keys for full attention, the last ``window - 1`` earlier ones and the
    boundary for a sliding-window layer. Without a mask (SDPA's causal shortcut: no padding) one query may see
    every key; a window of several queries needs an explicit bottom-right-aligned causal mask (a flash kernel
    aligns it so itself).
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


def write_prompt_kv(layer: "nn.Module", hidden_states: "torch.Tensor", position_embeddings: Any, cache: Any,
                    fitted: "LayerMaps | None" = None) -> None:
    """Independent K/V projection of a skipped layer: k = RoPE(k_norm(W_K LN(x))), v = W_V LN(x).

    ``W_K``, ``W_V`` are the layer's own projections, or ``fitted`` ones (calibrated K/V: the same shapes, with
    the layer's own biases if it has any); with those, a sink token (block-entry norm above
    ``fitted.sink_norm``) gets the sink projections (the layer's own where the maps hold none).
    """
    attn = layer.self_attn
    normed = layer.input_layernorm(hidden_states)  # (B, P, C)
    shape = (*normed.shape[:-1], -1, attn.head_dim)
    if fitted is None:
        keys, values = attn.k_proj(normed), attn.v_proj(normed)  # (B, P, H_kv * D) each
    else:
        keys, values = _fitted_kv(attn, hidden_states, normed, fitted)
    keys = keys.view(shape)  # (B, P, H_kv, D)
    k_norm = getattr(attn, "k_norm", None)
    if k_norm is not None:
        keys = k_norm(keys)
    keys = keys.transpose(1, 2)  # (B, H_kv, P, D)
    values = values.view(shape).transpose(1, 2)  # (B, H_kv, P, D)
    cos, sin = position_embeddings
    # The architecture's own RoPE (Gemma-3 local vs global bases, Qwen3-VL's interleaved mRoPE are already
    # folded into cos/sin by the model's rotary embedding for this layer).
    rope = sys.modules[type(attn).__module__].apply_rotary_pos_emb
    _, keys = rope(keys, keys, cos, sin)
    cache.update(keys, values, attn.layer_idx)


def _fitted_kv(attn: "nn.Module", hidden_states: "torch.Tensor", normed: "torch.Tensor", fitted: "LayerMaps"
               ) -> "tuple[torch.Tensor, torch.Tensor]":
    """Keys and values (B, P, H_kv * D) through fitted maps, sink tokens through their own projections.

    The sink test is elementwise (``torch.where``), not an index: no host sync, so CUDA graphs can capture it.
    """
    import torch
    import torch.nn.functional as F

    keys = F.linear(normed, fitted.k, attn.k_proj.bias)
    values = F.linear(normed, fitted.v, attn.v_proj.bias)
    if fitted.sink_norm is None:
        return keys, values
    sink = hidden_states.float().norm(dim=-1, keepdim=True) > fitted.sink_norm  # (B, P, 1)
    k_sink, v_sink = fitted.sink if fitted.sink is not None else (attn.k_proj.weight, attn.v_proj.weight)
    keys = torch.where(sink, F.linear(normed, k_sink, attn.k_proj.bias), keys)
    values = torch.where(sink, F.linear(normed, v_sink, attn.v_proj.bias), values)
    return keys, values
