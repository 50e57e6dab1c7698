"""``wanda``: unstructured Wanda (|W| * ||X||, arXiv 2306.11695) at 30% of every linear layer's weights, as in the POP
paper: an accuracy reference with no dense speedup."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from poptune.baselines.method import Baseline, BaselineMethod, Build
from poptune.baselines.scores import wanda_prune
from poptune.baselines.surgery import SparseWeights
from poptune.engine import decoder_of
from poptune.kvfit.calibration import Calibration

if TYPE_CHECKING:
    from torch import nn

__all__ = ["METHOD", "WANDA_SPARSITY", "Wanda", "wanda_weights"]

#: The sparsity the POP paper uses for its Wanda reference.
WANDA_SPARSITY = 0.3


def wanda_weights(model: "nn.Module", calib: Calibration, sparsity: float) -> SparseWeights:
    """Wanda, layer by layer: each layer's linear inputs are collected with the layers below already pruned."""
    import torch

    decoder = decoder_of(model)
    names = {id(p): name for name, p in model.named_parameters()}
    pruned: dict[str, torch.Tensor] = {}

    class _Stop(Exception):
        pass

    def stop(*_: Any) -> None:
        raise _Stop

    for layer in decoder.layers:
        linears = [m for m in layer.modules() if isinstance(m, torch.nn.Linear)]
        sums = {id(m): torch.zeros(m.in_features, dtype=torch.float32, device=m.weight.device) for m in linears}

        def collect(module: Any, args: tuple, sums: dict[int, Any] = sums) -> None:  # this layer's sums
            sums[id(module)] += args[0].detach().float().pow(2).flatten(0, -2).sum(dim=0)

        hooks = [m.register_forward_pre_hook(collect) for m in linears]
        hooks.append(layer.register_forward_hook(stop))
        try:
            with SparseWeights(dict(pruned), sparsity).applied(model), torch.inference_mode():
                for batch in calib.batches():
                    try:
                        decoder(input_ids=batch, use_cache=False)
                    except _Stop:
                        pass
        finally:
            for hook in hooks:
                hook.remove()
        for m in linears:
            pruned[names[id(m.weight)]] = wanda_prune(m.weight.detach(), sums[id(m)].sqrt(), sparsity)
    return SparseWeights(pruned, sparsity)


class Wanda(BaselineMethod):
    name = "wanda"
    summary = "unstructured Wanda (|W| * ||X||) at 30% of every linear layer's weights, an accuracy reference"
    removes_layers = False
    counts_layers = False
    own_ratio = WANDA_SPARSITY
    ratio_name = "wanda's `ratio` (sparsity)"

    def build(self, build: Build) -> Baseline:
        calib = build.calibration()
        transform = wanda_weights(build.model, calib, float(build.ratio))
        details = {"calibration": calib.describe(), **transform.describe(), "removed": []}
        return Baseline(self.name, build.ratio, transform, details=details, percent=True)

    def label(self, details: Mapping[str, Any], num_layers: int) -> tuple[str, float]:
        return f"{100 * details['ratio']:.0f}% unstructured", details["ratio"]


METHOD = Wanda()
