"""The skipped block's own K/V in one product: every skipped layer's keys and values of the pruned tokens at once.

With the layers' own K/V (:mod:`poptune.kv.own`), every layer of a skipped block projects the *same* hidden state:
the pruned tokens pass the block unchanged, so each layer's input norm, K/V projections, key norm and RoPE are
applied to the block-entry state. Done layer by layer that is some twenty small operations per layer. Here it is:

- **one normalisation** of the block-entry state, ``x / rms(x)`` (float32, as every supported RMSNorm computes it),
  shared by all the layers -- each layer's norm *weight* is folded into its K/V projection weights instead
  (``W_K diag(g)``, ``W_V diag(g)`` with ``g = w``, or ``1 + w`` for Gemma's norms, which scale by ``(1 + w)``);
- **one GEMM** of that state by the stacked folded weights of every layer, keys and values together;
- **one key norm** over all layers' heads (Qwen3 and Gemma-3's ``k_norm``: its weights stacked per layer), and
- **one rotary embedding** per group of layers that receive the same cos/sin (one group on Llama and Qwen3; the
  local and the global layers on Gemma-3), applied to the keys only (no query);

then each layer adds its slice to the cache when its own forward comes (the cache's and the masks' order are
untouched). The folded weights are made once per block and weights (kept beside the decoder, remade when a
parameter changes) and cost the K/V weights of the block once more.

It is exact up to float rounding: folding moves each norm's multiply into the weights (the per-layer path's
``(x_hat * g) @ W`` becomes ``x_hat @ (W diag(g))``), equal to the per-layer projection within float tolerance
(``tests/kv/test_block_kv.py``, chunked and whole, on Llama, Qwen3 and Gemma-3). A layer is written from the product
only when the engine hands it the very tensor the product was made from (the block's contract, see
:data:`poptune.kv.source.Write`) and the cos/sin its group was rotated with; anything else (Qwen3-VL's deepstack
injections inside the block, layers between non-contiguous skipped ones) goes the per-layer way
(:func:`poptune.kv.project.write_prompt_kv`). Models whose norms or projections this module does not know (not
plain ``nn.Linear``, another norm class) are not fused at all (:func:`plan` returns None).
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["BlockKV", "Folded", "folded", "norm_scale", "plan"]

#: The RMSNorm classes whose arithmetic is known: name -> whether it scales by ``(1 + w)`` in float32 (Gemma) or
#: by ``w`` after casting back to the input dtype (Llama, Qwen3, Qwen3-VL).
_NORMS: dict[str, bool] = {
    "LlamaRMSNorm": False,
    "Qwen3RMSNorm": False,
    "Qwen3VLTextRMSNorm": False,
    "Gemma3RMSNorm": True,
}

#: Folded weights per decoder: {(layers, dtype, device): Folded}; dropped with the decoder.
_FOLDED: "weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], Folded]]" = weakref.WeakKeyDictionary()


def _norm_kind(norm: Any) -> tuple[bool, float] | None:
    """(scales by 1 + w, eps) of a known RMSNorm, else None."""
    gemma = _NORMS.get(type(norm).__name__)
    if gemma is None:
        return None
    eps = getattr(norm, "eps", None) if gemma else getattr(norm, "variance_epsilon", None)
    return (gemma, float(eps)) if isinstance(eps, (int, float)) else None


def norm_scale(norm: Any) -> "torch.Tensor":
    """The float32 factor a known RMSNorm multiplies the normalised state by: ``1 + w`` (Gemma) or ``w``."""
    weight = norm.weight.float()
    return 1.0 + weight if _NORMS[type(norm).__name__] else weight


@dataclass
class Folded:
    """A block's K/V projections with each layer's input-norm weight folded in.

    Attributes:
        weight: (L * 2 * H_kv * D, C): per layer, its folded ``W_K`` rows then its folded ``W_V`` rows.
        bias: The matching biases, or None (no layer has any).
        k_scale: (L, 1, D): the layers' key-norm factors stacked (Llama-style in the weights' dtype, Gemma-style
            float32), or None (no key norm).
        signature: What the weights were made from (each parameter's address and version): remade when it changes.
    """

    weight: "torch.Tensor"
    bias: "torch.Tensor | None"
    k_scale: "torch.Tensor | None"
    signature: tuple[Any, ...]


def _signature(params: Sequence[Any]) -> tuple[Any, ...]:
    out: list[Any] = []
    for p in params:
        try:
            version: int | None = int(p._version)
        except (AttributeError, RuntimeError):  # inference tensors keep no version
            version = None
        out.append((p.data_ptr(), version))
    return tuple(out)


def _leading_run(skipped: Sequence[int]) -> list[int]:
    """The first skipped layers up to the first gap: the layers that all see the block-entry state."""
    run = list(skipped[:1])
    for i in skipped[1:]:
        if i != run[-1] + 1:
            break
        run.append(i)
    return run


def _fusable(layers: Sequence[Any]) -> bool:
    """Whether every layer's input norm, K/V projections and key norm are ones this module folds, alike."""
    import torch

    first = layers[0].self_attn
    kinds = {_norm_kind(layer.input_layernorm) for layer in layers}
    k_norms = {"absent" if getattr(layer.self_attn, "k_norm", None) is None else _norm_kind(layer.self_attn.k_norm)
               for layer in layers}
    if None in kinds or len(kinds) != 1 or None in k_norms or len(k_norms) != 1:
        return False
    shapes = set()
    for layer in layers:
        attn = layer.self_attn
        k, v = getattr(attn, "k_proj", None), getattr(attn, "v_proj", None)
        if type(k) is not torch.nn.Linear or type(v) is not torch.nn.Linear:
            return False
        shapes.add((k.weight.shape, v.weight.shape, k.weight.dtype, v.weight.dtype, k.weight.device,
                    k.bias is None, v.bias is None, attn.head_dim, type(attn).__module__))
    return len(shapes) == 1 and first.k_proj.weight.shape == first.v_proj.weight.shape


def _fold(layers: Sequence[Any]) -> Folded:
    """The folded, stacked projections of ``layers`` (see :class:`Folded`)."""
    import torch

    rows, biases = [], []
    for layer in layers:
        attn, scale = layer.self_attn, norm_scale(layer.input_layernorm)  # (C,) float32
        for proj in (attn.k_proj, attn.v_proj):
            rows.append((proj.weight.float() * scale).to(proj.weight.dtype))  # (H_kv * D, C)
            biases.append(proj.bias)
    k_scale = None
    if getattr(layers[0].self_attn, "k_norm", None) is not None:
        norms = [layer.self_attn.k_norm for layer in layers]
        gemma = _NORMS[type(norms[0]).__name__]
        k_scale = torch.stack([norm_scale(n) if gemma else n.weight for n in norms])[:, None, :]  # (L, 1, D)
    bias = None if biases[0] is None else torch.cat(biases)
    return Folded(torch.cat(rows), bias, k_scale, _signature(_params(layers)))


def _params(layers: Sequence[Any]) -> list[Any]:
    out: list[Any] = []
    for layer in layers:
        attn = layer.self_attn
        for proj in (attn.k_proj, attn.v_proj):
            out += [proj.weight, proj.bias] if proj.bias is not None else [proj.weight]
        out.append(layer.input_layernorm.weight)
    if getattr(layers[0].self_attn, "k_norm", None) is not None:
        out += [layer.self_attn.k_norm.weight for layer in layers]
    return out


def folded(decoder: Any, indices: Sequence[int]) -> Folded:
    """The folded projections of ``decoder``'s layers ``indices``, made once and remade when a weight changes."""
    layers = [decoder.layers[i] for i in indices]
    weight = layers[0].self_attn.k_proj.weight
    key = (tuple(indices), weight.dtype, str(weight.device))
    per_decoder = _FOLDED.setdefault(decoder, {})
    known = per_decoder.get(key)
    if known is None or known.signature != _signature(_params(layers)):
        known = per_decoder[key] = _fold(layers)
    return known


def plan(decoder: Any, skipped: Sequence[int]) -> "BlockKV | None":
    """The product of one segment over ``decoder``'s skipped layers, or None where it does not apply: fewer than two
    contiguous layers first in the block, or norms and projections this module does not know."""
    run = _leading_run(list(skipped))
    if len(run) < 2:
        return None
    layers = [decoder.layers[i] for i in run]
    if not _fusable(layers):
        return None
    return BlockKV(decoder, run)


def _pe_key(position_embeddings: Any) -> tuple[Any, ...]:
    """Which cos/sin a layer received, by their memory (the engine slices them afresh for each layer)."""
    return tuple((t.data_ptr(), tuple(t.shape), tuple(t.stride())) for t in position_embeddings)


class BlockKV:
    """One segment's K/V of a block's layers from one product (made on the first layer's write).

    Attributes:
        used: How many layers were written from the product (what the tests read).
    """

    def __init__(self, decoder: Any, indices: Sequence[int]) -> None:
        self.decoder = decoder
        self.indices = list(indices)
        self.position = {id(decoder.layers[i]): n for n, i in enumerate(self.indices)}
        self.entry: "torch.Tensor | None" = None
        self.keys: "torch.Tensor | None" = None  # (B, L, H_kv, P, D): normed, not rotated
        self.values: "torch.Tensor | None" = None  # (B, P, L, H_kv, D)
        self.rotated: dict[int, tuple[tuple[Any, ...], "torch.Tensor"]] = {}  # position -> (its cos/sin, keys)
        self.used = 0

    def write(self, layer: Any, hidden_states: "torch.Tensor", position_embeddings: Any, cache: Any) -> bool:
        """Add ``layer``'s K/V of ``hidden_states`` (B, P, C) to ``cache`` from the product; False (nothing done)
        where the product does not hold them: another layer, or another state than the one it was made from."""
        n = self.position.get(id(layer))
        if n is None or (self.entry is not None and hidden_states is not self.entry):
            return False
        if self.entry is None:
            if n != 0:
                return False
            self._project(hidden_states)
            self.entry = hidden_states
        keys = self._rotated(n, position_embeddings)
        assert self.values is not None  # made with the keys
        values = self.values[:, :, n].transpose(1, 2)  # (B, H_kv, P, D)
        cache.update(keys, values, layer.self_attn.layer_idx)
        self.used += 1
        return True

    def _project(self, x: "torch.Tensor") -> None:
        """Keys (normed) and values of every layer from one normalisation and one GEMM."""
        import torch
        import torch.nn.functional as F

        layers = [self.decoder.layers[i] for i in self.indices]
        made = folded(self.decoder, self.indices)
        _, eps = _norm_kind(layers[0].input_layernorm) or (False, 0.0)
        xf = x.float()
        x_hat = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)  # (B, P, C)
        attn = layers[0].self_attn
        b, p, _ = x.shape
        kv = F.linear(x_hat, made.weight, made.bias).view(b, p, len(layers), 2, -1, attn.head_dim)
        keys, self.values = kv[:, :, :, 0], kv[:, :, :, 1]  # (B, P, L, H_kv, D) each
        if made.k_scale is not None:
            keys = _key_norm(keys, made.k_scale, attn.k_norm)
        self.keys = keys.permute(0, 2, 3, 1, 4)  # (B, L, H_kv, P, D)

    def _rotated(self, n: int, position_embeddings: Any) -> "torch.Tensor":
        """Layer ``n``'s keys (B, H_kv, P, D), rotated with its cos/sin: with every other layer of its rotary group
        not yet rotated, in one call, on the first of them; alone if it received other cos/sin than its group."""
        key = _pe_key(position_embeddings)
        done = self.rotated.get(n)
        if done is not None and done[0] == key:
            return done[1]
        group = [n] if done is not None else [m for m in self._group(n) if m not in self.rotated]
        assert self.keys is not None
        keys = self.keys[:, group]  # (B, G, H_kv, P, D)
        b, g, h, p, d = keys.shape
        cos, sin = position_embeddings
        rope = sys.modules[type(self.decoder.layers[self.indices[n]].self_attn).__module__].apply_rotary_pos_emb
        flat = keys.reshape(b, g * h, p, d)
        _, rotated = rope(flat[:, :0], flat, cos, sin)  # the keys only: no query
        rotated = rotated.view(b, g, h, p, d)
        for j, m in enumerate(group):
            self.rotated[m] = (key, rotated[:, j])
        return rotated[:, group.index(n)]

    def _group(self, n: int) -> list[int]:
        """The layers (positions) that receive the same cos/sin as layer ``n``: those of its layer type where the
        model's rotary embedding is one per type (Gemma-3), else all."""
        per_type = getattr(getattr(self.decoder, "rotary_emb", None), "layer_types", None)
        types = getattr(self.decoder.config, "layer_types", None)
        if not per_type or not types:
            return list(range(len(self.indices)))
        mine = types[self.indices[n]]
        return [m for m, i in enumerate(self.indices) if types[i] == mine]


def _key_norm(keys: "torch.Tensor", k_scale: "torch.Tensor", norm: Any) -> "torch.Tensor":
    """Every layer's key norm at once: ``keys`` (B, P, L, H_kv, D), ``k_scale`` (L, 1, D) stacked factors."""
    import torch

    gemma, eps = _norm_kind(norm) or (False, 0.0)
    kf = keys.float()
    k_hat = kf * torch.rsqrt(kf.pow(2).mean(-1, keepdim=True) + eps)
    if gemma:
        return (k_hat * k_scale).to(keys.dtype)
    return k_scale * k_hat.to(keys.dtype)
