"""Anchor K/V: the skipped layers keep the K/V of the first prompt token and of the boundary window, no other.

A training-free form of SPEED's shallow prefill (arXiv 2605.06105). In every skipped layer the pruned tokens write
no K/V but the first prompt token's -- the attention sink, projected as the paper projects every pruned token
(the layer's own projections of its block-entry state, :mod:`poptune.kv.project`) -- and the boundary tokens
run the layer in full, as always, over the anchor and their own K/V. The layer's cache then really holds
``1 + W`` prompt tokens (``W``: the boundary window; :class:`poptune.kv.compact.CompactLayer`), so the K/V
memory of the skipped layers and the keys every later token reads there shrink from ``N`` prompt tokens to
``1 + W``. Decode attends, in those layers, to the anchor, the boundary and what it has generated, with the
model's own masks gathered at those tokens (padding, windows); every other layer is untouched.

SPEED trains the model for this; untrained, the boundary and decode lose sight of the pruned tokens in the
skipped layers, which costs accuracy: ``docs/kv-sources.md`` has the measurement.

- **Rows.** Left-padded rows keep their own first real token; a row whose first token is in the boundary keeps
  no anchor (its slot points at one of its pads, masked).
- **Segments.** The anchor is the first token of the prompt: a chunk or a later turn over a cache adds no other
  (its pruned tokens are dropped, its boundary kept); a layer whose cache held every token before keeps them.
- **Sliding-window layers** keep their window: the anchor leaves it, in a prompt longer than the window, as the
  full model's cache drops every token there.
- Needs eager or SDPA attention (4-D masks): flash attention aligns its window on key indices, which a compact
  cache no longer equals to positions. Needs a dynamic cache (static and quantized ones cannot drop tokens).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from poptune.errors import ConfigError, UnsupportedModelError
from poptune.kv import project
from poptune.kv.source import Decoder, KVSource, Segment, SkipPlan, Write

__all__ = ["SOURCE", "AnchorKV"]


class AnchorKV(KVSource):
    name = "anchor"
    label = "anchor K/V"
    tag = "kvanchor"
    help = ("only the first prompt token's and the boundary window's (SPEED's shallow prefill, untrained): the "
            "skipped layers' cache holds 1 + W prompt tokens")

    def check(self, config: SkipPlan) -> None:
        if config.skip == 0:
            raise ConfigError(f"`kv='{self.name}'` needs skip >= 1")

    def ready(self, decoder: Decoder, config: SkipPlan, skipped: Sequence[int], layout: str) -> None:
        if layout != "4d":
            raise UnsupportedModelError(f"`kv='{self.name}'` needs eager or sdpa attention (4-D masks): a flash "
                                        "kernel's sliding window counts key indices, which a compact cache changes")

    def kept(self, pruned: int) -> int:
        return min(pruned, 1)

    def writer(self, decoder: Decoder, config: SkipPlan, skipped: Sequence[int], segment: Segment) -> Write:
        return functools.partial(_write_anchor, segment=segment)

    def boundary_mask(self, layer: Any, cache: Any, mask: Any, queries: tuple[int, int], mask_offset: int,
                      device: Any, sliced: Callable[[], Any]) -> Any:
        """The model's mask gathered at the columns the layer's compact cache keeps (the anchor, the boundary)."""
        from poptune.kv.compact import CompactLayer, compact_mask

        held = cache.layers[layer.self_attn.layer_idx]
        if not isinstance(held, CompactLayer):
            return sliced()
        assert held.columns is not None  # a compacted layer the block wrote to
        return compact_mask(mask, held, queries, mask_offset, batch=held.columns.shape[0], device=device,
                            window=getattr(layer.self_attn, "sliding_window", None))

    def cache_context(self, decoder: Decoder, cache: Any, layout: str, exclude: Sequence[int] = ()
                      ) -> AbstractContextManager[None]:
        """The compact layers but ``exclude`` attend with the model's masks gathered at the tokens they keep
        (:func:`poptune.kv.compact.gathering`).

        Raises:
            UnsupportedModelError: under flash attention (2-D masks cannot be gathered).
        """
        from poptune.kv.compact import gathering

        if layout != "4d":
            raise UnsupportedModelError("a cache that dropped tokens needs eager or sdpa attention (4-D masks)")
        return gathering(decoder, cache, exclude)


SOURCE = AnchorKV()


def _write_anchor(layer: Any, hidden_states: Any, position_embeddings: Any, cache: Any, *, segment: Segment) -> None:
    """The pruned tokens of one skipped layer: the first prompt token's K/V kept (a new prompt), the rest dropped."""
    import torch

    from poptune.kv.compact import compact_layer

    held = compact_layer(cache, layer.self_attn.layer_idx)
    SOURCE.mark(cache)  # every later forward over the cache gathers its masks (AnchorKV.cache_context)
    batch, pruned = hidden_states.shape[:2]
    if held.get_seq_length() == 0 and pruned:
        first = segment.first
        if first is None:
            column, bound = torch.zeros(batch, dtype=torch.long, device=hidden_states.device), 0
        else:  # a row whose first token is in the boundary: its column 0, a pad (masked)
            column = torch.where(first < pruned, first, torch.zeros_like(first))
            bound = pruned - 1 if segment.pads is None else min(segment.pads, pruned - 1)
        keys, values = project.prompt_kv(layer, _at(hidden_states, column),
                                         tuple(_at(t, column) for t in position_embeddings))
        held.keep(keys, values, column[:, None], [bound])
    held.skip(pruned)


def _at(tensor: Any, column: Any) -> Any:
    """(B, 1, D): each row's position ``column[b]`` of ``tensor`` (B or 1, N, D)."""
    tensor = tensor.expand(column.shape[0], *tensor.shape[1:])
    return tensor.gather(1, column[:, None, None].expand(-1, 1, tensor.shape[-1]))
