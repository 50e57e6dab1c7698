"""Structured-pruning baselines measured like POP: layer removal by several metrics, and Wanda sparsity; and
:mod:`~poptune.baselines.importance`, POP's own analysis of which layers matter for prefill and for decode
(imported by what needs it, not re-exported here)."""

from poptune.baselines.methods import (
    DEPTH_METHODS,
    METHODS,
    WANDA_SPARSITY,
    Baseline,
    build_baseline,
    laco_merges,
    layer_count,
    merge_layers,
    sleb_order,
    wanda_weights,
)
from poptune.baselines.scores import angular_distances, block_influence, wanda_prune
from poptune.baselines.surgery import LayerRemoval, SparseWeights

__all__ = [
    "DEPTH_METHODS", "METHODS", "WANDA_SPARSITY", "Baseline", "LayerRemoval", "SparseWeights", "angular_distances",
    "block_influence", "build_baseline", "laco_merges", "layer_count", "merge_layers", "sleb_order", "wanda_prune",
    "wanda_weights",
]
