"""Width pruning with a kept library: torch-pruning's dependency graph removes MLP channels (``width`` baseline).

The LLM-Pruner / SliceGPT class of methods makes every layer narrower instead of removing layers. This baseline
uses torch-pruning (Fang et al., "DepGraph: Towards Any Structural Pruning", CVPR 2023; ``torch-pruning`` 1.6):
for each decoder layer's MLP, :class:`torch_pruning.DependencyGraph` finds the coupled group of an
intermediate channel (the gate and up projections' output row, the down projection's input column), scores
each group by its weights' L2 norm (:class:`torch_pruning.importance.GroupMagnitudeImportance`, the library's
default, no calibration), and prunes the lowest-scoring channels of every layer.

**Matched parameters.** ``ratio`` is the share of the decoder layers' parameters removed, as for the depth
baselines (removing k of L layers removes k / L of them): the channel share is ``ratio * (layer parameters) /
(MLP parameters)``, the same in every layer. Attention is left whole: Gemma-3 and most small models share one
K/V head across their query heads (grouped-query attention), so removing heads means removing query heads
around a shared K/V head, which torch-pruning's LLM recipe does not do for a single K/V head; a ratio the MLPs
alone cannot reach is refused.

The pruned MLPs are copies: :class:`MlpSwap` swaps them in while applied and gives the originals back, so one
loaded model serves every method (:mod:`poptune.transform`).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from poptune.baselines.method import Baseline, BaselineMethod, Build
from poptune.engine import decoder_of
from poptune.errors import ConfigError
from poptune.transform import Transform

if TYPE_CHECKING:
    from torch import nn

__all__ = ["METHOD", "PRUNER", "MlpSwap", "Width", "channel_share", "width_pruned"]

#: How the channels are scored and which library prunes them (stored with the measurement).
PRUNER = "torch-pruning DependencyGraph, GroupMagnitudeImportance (L2) per MLP, same share in every layer"


@dataclass(frozen=True, eq=False)
class MlpSwap(Transform):
    """Use ``mlps[i]`` as decoder layer i's MLP while applied (the narrower copies), the originals after."""

    mlps: tuple["nn.Module", ...]
    details: dict[str, Any]

    def describe(self) -> dict[str, Any]:
        return dict(self.details)

    @contextlib.contextmanager
    def applied(self, model: "nn.Module") -> Iterator[None]:
        layers = decoder_of(model).layers
        if len(layers) != len(self.mlps):
            raise ConfigError(f"{len(self.mlps)} pruned MLPs for a {len(layers)}-layer model")
        originals = [layer.mlp for layer in layers]
        for layer, mlp in zip(layers, self.mlps):
            layer.mlp = mlp
        try:
            yield
        finally:
            for layer, mlp in zip(layers, originals):
                layer.mlp = mlp


def _count(module: "nn.Module") -> int:
    return sum(p.numel() for p in module.parameters())


def channel_share(model: "nn.Module", ratio: float) -> float:
    """The share of every MLP's intermediate channels that removes ``ratio`` of the decoder layers' parameters.

    Raises:
        ConfigError: the MLPs alone cannot lose that many parameters (the share would reach 1).
    """
    layers = decoder_of(model).layers
    total = sum(_count(layer) for layer in layers)
    mlp = sum(_count(layer.mlp) for layer in layers)
    share = ratio * total / mlp
    if not 0 < share < 1:
        raise ConfigError(f"width pruning at ratio {ratio:g} would remove {100 * share:.0f}% of every MLP's "
                          f"channels (MLPs hold {100 * mlp / total:.0f}% of the layers' parameters): use a smaller "
                          "ratio")
    return share


def _prune(mlp: Any, share: float, hidden: int) -> int:
    """Prune ``share`` of ``mlp``'s intermediate channels in place (lowest group L2 norm); the channels kept."""
    import torch
    import torch_pruning as tp

    param = next(mlp.parameters())
    example = torch.zeros(1, 2, hidden, dtype=param.dtype, device=param.device)
    mlp.requires_grad_(True)  # the graph is traced through autograd
    with torch.inference_mode(False), torch.enable_grad():
        graph = tp.DependencyGraph().build_dependency(mlp, example_inputs=example, verbose=False)
    width = mlp.gate_proj.out_features
    group = graph.get_pruning_group(mlp.gate_proj, tp.prune_linear_out_channels, idxs=list(range(width)))
    scores = tp.importance.GroupMagnitudeImportance(p=2)(group)
    drop = sorted(torch.argsort(scores)[: round(share * width)].tolist())
    graph.get_pruning_group(mlp.gate_proj, tp.prune_linear_out_channels, idxs=drop).prune()
    mlp.requires_grad_(False)
    return mlp.gate_proj.out_features


def width_pruned(model: "nn.Module", ratio: float) -> MlpSwap:
    """Narrower copies of every layer's MLP removing ``ratio`` of the decoder layers' parameters (module
    docstring)."""
    layers = decoder_of(model).layers
    if not all(all(hasattr(layer.mlp, n) for n in ("gate_proj", "up_proj", "down_proj")) for layer in layers):
        raise ConfigError("width pruning needs gated MLPs (gate_proj, up_proj, down_proj), as in Llama, Qwen and Gemma")
    share = channel_share(model, ratio)
    hidden = decoder_of(model).config.hidden_size
    mlps, kept = [], []
    for layer in layers:
        mlp = copy.deepcopy(layer.mlp)
        kept.append(_prune(mlp, share, hidden))
        mlps.append(mlp.eval())
    removed = sum(_count(layer.mlp) for layer in layers) - sum(_count(m) for m in mlps)
    details = {"channel_share": share, "channels_kept": kept, "parameters_removed": removed,
               "layer_parameters": sum(_count(layer) for layer in layers), "pruner": PRUNER, "removed": []}
    return MlpSwap(tuple(mlps), details)


class Width(BaselineMethod):
    name = "width"
    summary = "width pruning: every MLP loses the same share of its channels (torch-pruning's dependency graph)"
    removes_layers = False
    counts_layers = False

    def build(self, build: Build) -> Baseline:
        swap = width_pruned(build.model, build.ratio)
        return Baseline(self.name, build.ratio, swap, details=swap.describe(), percent=True)

    def label(self, details: Mapping[str, Any], num_layers: int) -> tuple[str, float]:
        return f"{100 * details['channel_share']:.0f}% of MLP channels", details["ratio"]


METHOD = Width()
