"""The layers' own K/V: the paper's POP, the default source.

A skipped layer writes each pruned token's K/V through its own input norm, K/V projections, key norm and RoPE,
applied to the hidden state entering the block (:mod:`poptune.kv.project`); its cache holds every prompt token. The
layers that all see the block-entry state get theirs from one product (:mod:`poptune.kv.block_kv`): one GEMM with
each layer's norm weight folded into its projections, one key norm and one rotary embedding for the block.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from poptune.kv import block_kv, project
from poptune.kv.source import Decoder, KVSource, Segment, SkipPlan, Write

__all__ = ["SOURCE", "OwnKV"]


class OwnKV(KVSource):
    name = "own"
    help = "their own projections of the block-entry state (the paper; the default)"

    def writer(self, decoder: Decoder, config: SkipPlan, skipped: Sequence[int], segment: Segment) -> Write:
        fused = block_kv.plan(decoder, skipped)  # every layer's K/V of the block-entry state in one product

        def write(layer: Any, hidden_states: Any, position_embeddings: Any, cache: Any) -> None:
            if fused is None or not fused.write(layer, hidden_states, position_embeddings, cache):
                project.write_prompt_kv(layer, hidden_states, position_embeddings, cache)

        return write


SOURCE = OwnKV()
