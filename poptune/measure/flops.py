"""The ideal prefill speedup of a POP configuration, from FLOPs.

A multiply-add counts 2 FLOPs. Per token and layer: the Q/K/V/O projections, the (gated) FFN, and attention
over the keys the token sees (causal, clipped by the sliding window on sliding layers). A skipped layer costs
only its K and V projections for the pruned tokens -- those its K/V source keeps (anchor K/V: the first only,
:meth:`poptune.kv.source.KVSource.kept`), over which its boundary tokens then attend. Both sides compute the LM
head for one position.
Embedding look-ups, norms and RoPE are ignored (they are memory-bound and small). The ideal ratio is an upper
bound on what a perfect kernel schedule could get; measured speedups are reported beside it.

What attention really computes depends on the kernel: with ``attention="sdpa"`` (transformers' default), a
sliding-window layer gets a materialised mask once the prompt reaches the window (``kv_length >= window``,
transformers' ``_ignore_causal_mask_sdpa``; Gemma-3-270M from 512 tokens on), and SDPA then computes every
query-key pair, masked ones too; a full-attention layer runs SDPA's causal path (blocks above the diagonal
skipped). With ``attention="eager"`` every layer multiplies the whole square. With None (or ``flash``/``flex``)
each query counts only the keys it sees. Under CUDA-graph capture transformers cannot take SDPA's causal
shortcut when it is given a mask (it would read the mask on the host), and materialises a 4-D mask: SDPA then
computes every query-key pair of every layer (``materialised=True``). Graph timing passes no mask for unpadded
text prompts (:func:`poptune.measure.graphs.graph_inputs`), so they keep the causal path; padded or image
prompts under graphs are counted with the whole square. :func:`assumption` states this in words for records.

An image prompt also runs the vision encoder, the same on both sides (POP prunes the language model only);
its FLOPs (:func:`vision_flops`) enter the ideal ratio as a fixed cost, so the ratio stays an honest bound.
"""

from __future__ import annotations

from typing import Any

from poptune.engine import PopConfig
from poptune.kv import registry as kv_registry

__all__ = ["prefill_flops", "ideal_speedup", "vision_flops", "assumption"]


def assumption(attention: str | None, *, graphs: bool = False) -> str:
    """The ideal's attention assumption for an attention implementation, in words (for records); with
    ``graphs``, what CUDA-graph timing computes too."""
    if attention == "eager":
        text = "eager attention: every query-key pair of each layer computed (masked ones too)"
    elif attention == "sdpa":
        text = ("sdpa: causal keys on full-attention layers; on sliding-window layers the window's keys below the "
                "window length, every query-key pair from it on (transformers materialises the mask there)")
    else:
        text = "keys each query sees (causal, clipped by the sliding window)"
    if graphs and attention in ("sdpa", "eager"):
        text += ("; CUDA graphs: unpadded text prompts captured without a mask (the same causal path), padded and "
                 "image prompts with a materialised mask (every query-key pair of every layer)")
    return text


def _shape(config: Any) -> dict[str, Any]:
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    layers = config.num_hidden_layers
    return dict(
        hidden=config.hidden_size,
        ffn=config.intermediate_size,
        heads=heads,
        kv_heads=getattr(config, "num_key_value_heads", None) or heads,
        head_dim=head_dim,
        vocab=config.vocab_size,
        layers=layers,
        types=list(getattr(config, "layer_types", None) or ["full_attention"] * layers),
        window=getattr(config, "sliding_window", None),
    )


def _attended_kept(first: int, stop: int, kept: int, window: int | None, dense: bool) -> int:
    """Keys computed for the boundary queries ``[first, stop)`` of a skipped layer that holds ``kept`` of the
    ``first`` pruned tokens (the first ones: every one, or anchor K/V's first token) and the boundary's."""
    if kept >= first:
        return _attended(first, stop, window, dense)
    anchor = kept if window is None or first < window else 0  # a sliding layer drops it once out of its window
    if dense:
        return (stop - first) * (anchor + stop - first)
    return sum(min(i - first + 1, window or stop) + (kept if window is None or i < window else 0)
               for i in range(first, stop))


def _attended(first: int, stop: int, window: int | None, dense: bool = False) -> int:
    """Keys computed for the queries at positions ``[first, stop)``, summed (causal, optionally windowed; with
    ``dense``, every one of the ``stop`` keys, as a kernel given a materialised mask computes them)."""
    if dense:
        return (stop - first) * stop
    if window is None:
        return sum(i + 1 for i in range(first, stop))
    return sum(min(i + 1, window) for i in range(first, stop))


def prefill_flops(config: Any, length: int, pop: PopConfig | None = None, *, attention: str | None = None,
                  materialised: bool = False) -> float:
    """FLOPs of one prefill of ``length`` tokens (batch 1) with or without POP.

    Args:
        config: The decoder's text config (``hidden_size``, ``num_hidden_layers``, ...).
        length: Prompt length in tokens.
        pop: The configuration, or None for the full model.
        attention: The attention implementation (``sdpa``, ``eager``; None: count only the keys each query
            sees); see the module docstring.
        materialised: SDPA is given a materialised 4-D mask on every layer (a padded or image prompt under
            CUDA-graph capture): every query-key pair counts.
    """
    s = _shape(config)
    c, d = s["hidden"], s["head_dim"]
    qo = 2 * 2 * c * s["heads"] * d
    kv = 2 * 2 * c * s["kv_heads"] * d
    layer_dense = qo + kv + 3 * 2 * c * s["ffn"]
    per_key = 2 * 2 * s["heads"] * d  # scores and weighted values, per query-key pair

    def window_of(layer: int) -> int | None:
        return s["window"] if s["types"][layer] == "sliding_attention" else None

    def dense(layer: int) -> bool:
        win = window_of(layer)
        return attention == "eager" or (attention == "sdpa" and (materialised or (win is not None and length >= win)))

    skipped = set(pop.skipped_layers(s["layers"])) if pop is not None and pop.skip else set()
    pruned = pop.rule.pruned(length) if skipped and pop is not None else 0
    if pruned == 0:
        skipped = set()
    kept = kv_registry.source(pop.kv).kept(pruned) if skipped and pop is not None else 0
    total = 2.0 * c * s["vocab"]  # the LM head for the last position
    for layer in range(s["layers"]):
        win = window_of(layer)
        if layer in skipped:
            # Pruned tokens only write K/V (those kept); boundary tokens run the whole layer over the keys held.
            total += kept * kv + (length - pruned) * layer_dense + per_key * _attended_kept(pruned, length, kept, win,
                                                                                            dense(layer))
        else:
            total += length * layer_dense + per_key * _attended(0, length, win, dense(layer))
    return float(total)


def ideal_speedup(config: Any, length: int, pop: PopConfig, *, fixed: float = 0.0, attention: str | None = None,
                  materialised: bool = False) -> float:
    """Full-model prefill FLOPs over POP prefill FLOPs for a ``length``-token prompt.

    ``fixed``: FLOPs both sides spend outside the language model (the vision encoder of an image prompt);
    ``attention``, ``materialised``: as :func:`prefill_flops`.
    """
    full = prefill_flops(config, length, attention=attention, materialised=materialised)
    return (fixed + full) / (fixed + prefill_flops(config, length, pop, attention=attention, materialised=materialised))


def vision_flops(config: Any, patches: int) -> float:
    """FLOPs of the vision encoder for one image of ``patches`` patches, up to its tokens in the text width.

    Args:
        config: The vision-language model's config: Qwen3-VL (patch embedding, ViT blocks with full attention
            over the image, the 2x2 merger and one merger per deepstack layer) or Gemma-3 (SigLIP patch
            embedding and blocks, the projection of the pooled tokens).
        patches: Patches of the image (Qwen3-VL: ``t * h * w`` of its grid; Gemma-3: ``(896 / 14) ** 2``).
    """
    vision = config.vision_config
    h = vision.hidden_size
    per_patch = 2 * 4 * h * h + 2 * 2 * h * vision.intermediate_size + 2 * 2 * h * patches  # proj, MLP, attention
    if config.model_type == "qwen3_vl":
        layers = vision.depth
        embed = 2 * 3 * vision.temporal_patch_size * vision.patch_size**2 * h
        wide = h * vision.spatial_merge_size**2
        mergers = 1 + len(getattr(vision, "deepstack_visual_indexes", None) or [])
        out = mergers * (patches // vision.spatial_merge_size**2) * 2 * (wide * wide + wide * vision.out_hidden_size)
    else:
        layers = vision.num_hidden_layers
        embed = 2 * 3 * vision.patch_size**2 * h
        out = config.mm_tokens_per_image * 2 * h * config.text_config.hidden_size
    return float(patches * (embed + layers * per_patch) + out)
