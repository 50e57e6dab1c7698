"""Structured-pruning baselines measured like POP: layer removal by several metrics, and Wanda sparsity; and
:mod:`~poptune.baselines.importance`, POP's own analysis of which layers matter for prefill and for decode
(imported by what needs it, not re-exported here)."""

from poptune.baselines.laco import laco_merges, merge_layers
from poptune.baselines.method import Baseline, BaselineMethod
from poptune.baselines.methods import DEPTH_METHODS, METHODS, WANDA_SPARSITY, build_baseline, layer_count, method
from poptune.baselines.scores import angular_distances, block_influence, wanda_prune
from poptune.baselines.sleb import sleb_order
from poptune.baselines.surgery import LayerRemoval, SparseWeights
from poptune.baselines.wanda import wanda_weights

__all__ = [
    "DEPTH_METHODS", "METHODS", "WANDA_SPARSITY", "Baseline", "BaselineMethod", "LayerRemoval", "SparseWeights",
    "angular_distances", "block_influence", "build_baseline", "laco_merges", "layer_count", "merge_layers", "method",
    "sleb_order", "wanda_prune", "wanda_weights",
]
