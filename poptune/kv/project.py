"""The independent K/V projection of a skipped layer: what POP writes for tokens that skip it.

``k = RoPE(k_norm(W_K LN(x)))``, ``v = W_V LN(x)`` with the layer's own input norm, key norm and RoPE applied to
the hidden state ``x`` entering the skipped block (a state the layer never sees in the full model). ``W_K``,
``W_V`` are the layer's own projections, or fitted ones (:class:`poptune.kv.maps.LayerMaps`: calibrated K/V).
Every K/V source writes through here; the prefix replay (:mod:`poptune.engine.prefix`) too, for the layers before the
block.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from poptune.kv.maps import LayerMaps

__all__ = ["prompt_kv", "write_prompt_kv"]


def prompt_kv(layer: Any, hidden_states: "torch.Tensor", position_embeddings: Any,
              fitted: "LayerMaps | None" = None) -> "tuple[torch.Tensor, torch.Tensor]":
    """Keys and values (B, H_kv, P, D) of ``hidden_states`` (B, P, C) through ``layer``'s K/V projections.

    With ``fitted`` (calibrated K/V: the same shapes, with the layer's own biases if it has any), a sink token
    (block-entry norm above ``fitted.sink_norm``) gets the sink projections (the layer's own where the maps hold
    none).
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
    _, keys = rope(keys[:, :0], keys, cos, sin)  # the keys only: an empty query, not the keys rotated twice
    return keys, values


def write_prompt_kv(layer: Any, hidden_states: "torch.Tensor", position_embeddings: Any, cache: Any,
                    fitted: "LayerMaps | None" = None) -> None:
    """Add the K/V of ``hidden_states`` through ``layer``'s projections (:func:`prompt_kv`) to ``cache``."""
    keys, values = prompt_kv(layer, hidden_states, position_embeddings, fitted)
    cache.update(keys, values, layer.self_attn.layer_idx)


def _fitted_kv(attn: Any, hidden_states: "torch.Tensor", normed: "torch.Tensor", fitted: "LayerMaps"
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
