"""``sleb``: greedily remove the layer whose removal raises calibration perplexity least, k times; the first and
last layers are never removed (SLEB, arXiv 2402.09025)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from poptune.baselines.method import Baseline, BaselineMethod, Build
from poptune.baselines.surgery import LayerRemoval, removal_keeping
from poptune.engine import decoder_of
from poptune.kvfit.calibration import Calibration, calibration_nll, layer_inputs

if TYPE_CHECKING:
    from torch import nn

__all__ = ["METHOD", "Sleb", "sleb_order"]


def sleb_order(model: "nn.Module", calib: Calibration, k: int,
               progress: Callable[[str], None] | None = None, *, reuse: bool = True) -> tuple[list[int], list[float]]:
    """SLEB's greedy elimination: k layers, each the one whose removal gives the lowest calibration NLL.

    Removing layer ``j`` leaves every layer below it as it was, so each step runs the model as it is once,
    keeping every layer's input (:func:`~poptune.kvfit.calibration.layer_inputs`), and each candidate runs only
    the layers above its own from there: the same losses bit for bit (``reuse=False``: every candidate's whole
    forward, the reference).

    Returns:
        ``(removed in order, NLL after each removal)``; the first and last layers are never candidates.
    """
    total = len(decoder_of(model).layers)
    removed: list[int] = []
    losses: list[float] = []
    for _ in range(k):
        kept = [i for i in range(total) if i not in removed]
        inputs = None
        if reuse:
            with LayerRemoval(tuple(sorted(removed))).applied(model):
                inputs = layer_inputs(model, calib)
        best: tuple[float, int] | None = None
        for layer in range(1, total - 1):
            if layer in removed:
                continue
            if inputs is None:
                with LayerRemoval(tuple(sorted([*removed, layer]))).applied(model):
                    nll = calibration_nll(model, calib)
            else:  # from the candidate's own input, through the kept layers above it
                at = kept.index(layer)
                with LayerRemoval(removal_keeping(total, kept[at + 1 :])).applied(model):
                    nll = calibration_nll(model, calib, [batch[at] for batch in inputs])
            if best is None or nll < best[0]:
                best = (nll, layer)
        assert best is not None
        removed.append(best[1])
        losses.append(best[0])
        if progress:
            progress(f"sleb: removed layer {best[1]} (calibration NLL {best[0]:.3f})")
    return removed, losses


class Sleb(BaselineMethod):
    name = "sleb"
    summary = "greedily remove the layer whose removal raises calibration perplexity least, k times (SLEB)"

    def most(self, num_layers: int) -> int:
        return num_layers - 2  # the first and last layers are never removed

    def build(self, build: Build) -> Baseline:
        assert build.k is not None
        calib = build.calibration()
        if len(build.memo.get("sleb", ((), ()))[0]) < build.k:  # SLEB's order for k layers prefixes that for more
            build.memo["sleb"] = sleb_order(build.model, calib, build.k, build.progress)
        order, losses = (list(x[: build.k]) for x in build.memo["sleb"])
        details = {"calibration": calib.describe(), "removed": sorted(order), "order": order, "nll": losses}
        return Baseline(self.name, build.ratio, LayerRemoval(tuple(sorted(order))), details=details)


METHOD = Sleb()
