"""Structured-pruning baselines measured like POP: layer removal by several metrics, and Wanda sparsity."""

from .calibration import Calibration, CalibrationSpec, calibration, calibration_nll, residual_stream
from .methods import (
    DEPTH_METHODS, METHODS, WANDA_SPARSITY, Baseline, build_baseline, laco_merges, layer_count, merge_layers,
    sleb_order, wanda_weights,
)
from .scores import angular_distances, block_influence, wanda_prune
from .surgery import LayerRemoval, SparseWeights, Transform, applied

__all__ = [
    "DEPTH_METHODS", "METHODS", "WANDA_SPARSITY", "Baseline", "Calibration", "CalibrationSpec", "LayerRemoval",
    "SparseWeights", "Transform", "angular_distances", "applied", "block_influence", "build_baseline",
    "calibration", "calibration_nll", "laco_merges", "layer_count", "merge_layers", "residual_stream",
    "sleb_order", "wanda_prune", "wanda_weights",
]
