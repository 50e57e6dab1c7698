"""The layers' own K/V: the paper's POP, the default source.

A skipped layer writes each pruned token's K/V through its own input norm, K/V projections, key norm and RoPE,
applied to the hidden state entering the block (:mod:`poptune.kv.project`); its cache holds every prompt token.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from poptune.kv import project
from poptune.kv.source import Decoder, KVSource, Segment, SkipPlan, Write

__all__ = ["SOURCE", "OwnKV"]


class OwnKV(KVSource):
    name = "own"
    help = "their own projections of the block-entry state (the paper; the default)"

    def writer(self, decoder: Decoder, config: SkipPlan, skipped: Sequence[int], segment: Segment) -> Write:
        def write(layer: Any, hidden_states: Any, position_embeddings: Any, cache: Any) -> None:
            project.write_prompt_kv(layer, hidden_states, position_embeddings, cache)

        return write


SOURCE = OwnKV()
