"""Structured-pruning baselines measured like POP: layer removal by several metrics, and Wanda sparsity."""

from .surgery import LayerRemoval, SparseWeights, Transform, applied

__all__ = ["LayerRemoval", "SparseWeights", "Transform", "applied"]
