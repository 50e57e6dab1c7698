"""``laco``: layer collapse (LaCo, arXiv 2402.11187): from the top down, merge C consecutive layers into the first by
parameter differences, ``theta = theta_l + sum_k (theta_{l+k} - theta_l)``, and keep the merge if the output
representation stays cosine-similar above a threshold; the threshold is lowered in steps of 0.05 until k layers are
gone (the one used is recorded)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from poptune.baselines.method import Baseline, BaselineMethod, Build
from poptune.baselines.surgery import LayerRemoval, removal_keeping
from poptune.engine import decoder_of
from poptune.kvfit.calibration import Calibration, layer_inputs

if TYPE_CHECKING:
    from torch import nn

__all__ = ["LACO_INTERVAL", "LACO_LAYERS", "LACO_STEP", "LACO_THRESHOLD", "METHOD", "Laco", "laco_merges",
           "merge_layers"]

#: LaCo's settings (paper, Llama2-7B): layers merged at once, least interval between merges, first threshold.
LACO_LAYERS, LACO_INTERVAL, LACO_THRESHOLD, LACO_STEP = 4, 2, 0.65, 0.05


def merge_layers(layers: list["nn.Module"]) -> "nn.Module":
    """LaCo's reserving-differences merge: a copy of ``layers[0]`` with ``theta_0 + sum_k (theta_k - theta_0)``."""
    import torch

    merged = copy.deepcopy(layers[0])
    others = [dict(layer.named_parameters()) for layer in layers[1:]]
    with torch.no_grad():
        for name, param in merged.named_parameters():
            base = param.detach().float()
            total = base.clone()
            for other in others:
                total += other[name].detach().float() - base
            param.copy_(total.to(param.dtype))
    return merged


def laco_merges(model: "nn.Module", calib: Calibration, k: int, *, layers: int = LACO_LAYERS,
                interval: int = LACO_INTERVAL, threshold: float = LACO_THRESHOLD,
                progress: Callable[[str], None] | None = None, reuse: bool = True,
                ) -> tuple[LayerRemoval, dict[str, Any]]:
    """LaCo until ``k`` layers are merged away.

    From the top, layer ``l`` absorbs the ``layers - 1`` layers above it (fewer where that would overshoot k);
    the merge is kept if the cosine similarity of the final representations (mean over calibration tokens)
    to the original model's exceeds the threshold, and the next candidate is ``interval`` layers lower; else
    one lower. The bottom candidate is layer 1. If a pass from the top ends short of k, the threshold drops by
    0.05 and the search starts again from the top of the merged model.

    A merge at ``l`` leaves the layers below ``l`` as they were and a pass only goes down, so each pass runs the
    model as it is once, keeping every layer's input (:func:`~poptune.kvfit.calibration.layer_inputs`), and each
    candidate runs only from its own layer up: the same similarities bit for bit (``reuse=False``: every
    candidate's whole forward, the reference).
    """
    import torch

    decoder = decoder_of(model)
    original = list(decoder.layers)
    total = len(original)

    def output(inputs: list["torch.Tensor"] | None = None) -> "torch.Tensor":
        given = ({"input_ids": b} for b in calib.batches()) if inputs is None else \
            ({"inputs_embeds": h} for h in inputs)
        with torch.inference_mode():
            return torch.cat([decoder(**g, use_cache=False).last_hidden_state.float() for g in given])

    reference = output()
    kept = list(range(total))
    replaced: dict[int, nn.Module] = {}
    merges: list[dict[str, Any]] = []
    while True:
        pos = len(kept) - layers
        inputs = None
        if reuse and pos >= 1 and total - len(kept) < k:  # the model as this pass starts it (a merge changes
            # only the layers from its own up, and the pass goes down)
            with LayerRemoval(removal_keeping(total, kept), replaced).applied(model):
                inputs = layer_inputs(model, calib)
        while pos >= 1 and total - len(kept) < k:
            absorb = min(layers - 1, k - (total - len(kept)), len(kept) - 1 - pos)
            if absorb < 1:
                pos -= 1
                continue
            group = kept[pos : pos + absorb + 1]
            merged = merge_layers([replaced.get(i, original[i]) for i in group])
            candidate_kept = kept[: pos + 1] + kept[pos + absorb + 1 :]
            candidate = LayerRemoval(
                removal_keeping(total, candidate_kept),
                {**{i: m for i, m in replaced.items() if i in candidate_kept}, group[0]: merged},
            )
            if inputs is None:
                with candidate.applied(model):
                    similarity = float(torch.nn.functional.cosine_similarity(output(), reference, dim=-1).mean())
            else:  # from the merged layer's input, through it and the layers above
                tail = candidate_kept[pos:]
                start = LayerRemoval(removal_keeping(total, tail),
                                     {i: m for i, m in candidate.replaced.items() if i in tail})
                with start.applied(model):
                    mine = output([batch[pos] for batch in inputs])
                similarity = float(torch.nn.functional.cosine_similarity(mine, reference, dim=-1).mean())
            if similarity > threshold:
                kept, replaced = candidate_kept, dict(candidate.replaced)
                merges.append({"into": group[0], "merged": group[1:], "similarity": similarity})
                if progress:
                    progress(f"laco: merged {group[1:]} into {group[0]} (similarity {similarity:.3f})")
                pos -= interval
            else:
                pos -= 1
        if total - len(kept) >= k or threshold <= -1:
            break
        threshold = round(threshold - LACO_STEP, 4)
    removal = LayerRemoval(removal_keeping(total, kept), replaced)
    return removal, {"merges": merges, "threshold": threshold, "layers_per_merge": layers, "interval": interval}


class Laco(BaselineMethod):
    name = "laco"
    summary = "layer collapse: merge consecutive layers by parameter differences while the output stays similar"

    def build(self, build: Build) -> Baseline:
        assert build.k is not None
        calib = build.calibration()
        removal, info = laco_merges(build.model, calib, build.k, progress=build.progress)
        details = {"calibration": calib.describe(), "removed": list(removal.removed), "order": [], **info}
        return Baseline(self.name, build.ratio, removal, details=details)


METHOD = Laco()
