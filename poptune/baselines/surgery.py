"""Reversible model surgery for the structured-pruning baselines: removing (or merging) layers, sparse weights.

Both are transforms (:class:`poptune.transform.Transform`): applied for the duration of a
``with transform.applied(model):`` block and undone after, so one loaded model serves the full model, POP and
every baseline, interleaved call by call as the timer needs.

Removing layers keeps the model consistent for the cache and the attention masks: the kept layers are
renumbered (``layer_idx`` of each layer and its attention, which index the KV cache), and the decoder config's
``num_hidden_layers`` and ``layer_types`` list the kept layers' own types, so a Gemma-3 sliding-window layer
keeps its window and its sliding cache, wherever it lands. The config object is the one ``generate`` builds
its cache from, so generation with a removed-layer model is consistent too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from poptune.engine import decoder_of
from poptune.errors import ConfigError
from poptune.transform import Transform

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = ["LayerRemoval", "SparseWeights", "removal_keeping"]


def removal_keeping(total: int, layers: list[int]) -> tuple[int, ...]:
    """The original indices a removal takes away so that only ``layers`` (in order) of ``total`` are left."""
    return tuple(i for i in range(total) if i not in set(layers))


@dataclass(frozen=True, eq=False)
class LayerRemoval(Transform):
    """Remove the decoder layers ``removed`` (original indices), optionally replacing kept ones.

    Args:
        removed: Original indices of the layers removed, for prefill and decode alike.
        replaced: Original index -> module used instead of that layer (LaCo's merged layers).
    """

    removed: tuple[int, ...]
    replaced: Mapping[int, "nn.Module"] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if list(self.removed) != sorted(set(self.removed)) or (self.removed and self.removed[0] < 0):
            raise ConfigError(f"removed layers must be distinct indices >= 0 in order, got {list(self.removed)}")
        overlap = set(self.removed) & set(self.replaced)
        if overlap:
            raise ConfigError(f"layers {sorted(overlap)} are both removed and replaced")

    def describe(self) -> dict[str, Any]:
        return {"removed": list(self.removed), "replaced": sorted(self.replaced)}

    @contextlib.contextmanager
    def applied(self, model: "nn.Module") -> Iterator[None]:
        from torch import nn

        decoder = decoder_of(model)
        config = decoder.config
        layers = decoder.layers
        total = len(layers)
        if self.removed and self.removed[-1] >= total or len(self.removed) >= total:
            raise ConfigError(f"cannot remove layers {list(self.removed)} of a {total}-layer model")
        kept = [i for i in range(total) if i not in set(self.removed)]
        modules = [self.replaced.get(i, layers[i]) for i in kept]
        saved_types = getattr(config, "layer_types", None)
        saved_idx = [(m, getattr(m, "layer_idx", None), m.self_attn.layer_idx) for m in modules]
        saved_count = config.num_hidden_layers
        for new_idx, module in enumerate(modules):
            if hasattr(module, "layer_idx"):
                module.layer_idx = new_idx
            module.self_attn.layer_idx = new_idx  # the KV-cache slot this layer reads and writes
        decoder.layers = nn.ModuleList(modules)
        config.num_hidden_layers = len(kept)
        if saved_types is not None:
            config.layer_types = [saved_types[i] for i in kept]
        try:
            yield
        finally:
            decoder.layers = layers
            config.num_hidden_layers = saved_count
            if saved_types is not None:
                config.layer_types = saved_types
            for module, layer_idx, attn_idx in saved_idx:
                if layer_idx is not None:
                    module.layer_idx = layer_idx
                module.self_attn.layer_idx = attn_idx


@dataclass(frozen=True, eq=False)
class SparseWeights(Transform):
    """Replace some parameters by pruned copies (unstructured sparsity: zeros in dense tensors).

    Args:
        weights: Parameter name (as in ``model.named_parameters()``) -> the pruned tensor, same shape.
        sparsity: The fraction of zeros the method aimed at (recorded).
    """

    weights: Mapping[str, "torch.Tensor"]
    sparsity: float

    def describe(self) -> dict[str, Any]:
        zeros = sum(int((w == 0).sum()) for w in self.weights.values())
        total = sum(w.numel() for w in self.weights.values())
        return {"sparsity": self.sparsity, "tensors": len(self.weights), "zeros": zeros / max(total, 1)}

    @contextlib.contextmanager
    def applied(self, model: "nn.Module") -> Iterator[None]:
        params = dict(model.named_parameters())
        missing = [name for name in self.weights if name not in params]
        if missing:
            raise ConfigError(f"the model has no parameter(s) {', '.join(missing[:3])}")
        originals = {name: params[name].data for name in self.weights}
        for name, pruned in self.weights.items():
            params[name].data = pruned
        try:
            yield
        finally:
            for name, data in originals.items():
                params[name].data = data

