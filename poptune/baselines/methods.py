"""The structured-pruning baselines POP is compared with, each built at a pruning ratio from calibration text.

=============== =====================================================================================================
``static-last``  remove the last k layers (prefill and decode)
``shortgpt``     remove the k layers of lowest Block Influence (ShortGPT, arXiv 2403.03853)
``angular``      remove the contiguous block of k layers with the smallest angular distance between its input
                 and output on the last token (Gromov et al., arXiv 2403.17887; no healing)
``sleb``         greedily remove the layer whose removal raises calibration perplexity least, k times; the first
                 and last layers are never removed (SLEB, arXiv 2402.09025)
``laco``         layer collapse (LaCo, arXiv 2402.11187): from the top down, merge C consecutive layers into the
                 first by parameter differences, ``theta = theta_l + sum_k (theta_{l+k} - theta_l)``, and keep the
                 merge if the output representation stays cosine-similar above a threshold; the threshold is
                 lowered in steps of 0.05 until k layers are gone (the one used is recorded)
``shortgpt-gen`` ShortGPT's prefill-only variant: the k lowest-BI layers are skipped in prefill with their K/V
                 still written (POP's engine with an explicit layer set), no boundary handling; decode is full
``width``        width pruning with torch-pruning's dependency graph: every MLP loses the same share of its
                 channels (lowest group L2 norm), removing ``ratio`` of the decoder layers' parameters
                 (:mod:`poptune.baselines.width`; LLM-Pruner / SliceGPT class)
``wanda``        unstructured Wanda (|W| * ||X||, arXiv 2306.11695) at 30% of every linear layer's weights, as in
                 the POP paper: an accuracy reference with no dense speedup
=============== =====================================================================================================

k = round(ratio * L). Every method returns a :class:`Baseline`: a reversible model transform and/or a POP
configuration, plus the details (removal order, scores, calibration amount, source and seed) stored with it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from poptune.baselines.scores import angular_distances, block_influence, wanda_prune
from poptune.baselines.surgery import LayerRemoval, SparseWeights
from poptune.boundary import registry as boundary_registry
from poptune.engine import PopConfig, decoder_of
from poptune.errors import ConfigError
from poptune.kvfit.calibration import (
    Calibration,
    CalibrationSpec,
    calibration,
    calibration_nll,
    layer_inputs,
    residual_stream,
)
from poptune.transform import Transform

if TYPE_CHECKING:
    from torch import nn

__all__ = [
    "METHODS", "DEPTH_METHODS", "WANDA_SPARSITY", "Baseline", "check_ratio", "layer_count", "build_baseline",
    "sleb_order", "laco_merges", "merge_layers", "wanda_weights",
]

METHODS = ("static-last", "shortgpt", "angular", "sleb", "laco", "shortgpt-gen", "width", "wanda")
#: The methods that remove layers for prefill and decode: POP's "depth baselines".
DEPTH_METHODS = ("static-last", "shortgpt", "angular", "sleb", "laco")
#: The sparsity the POP paper uses for its Wanda reference.
WANDA_SPARSITY = 0.3

#: LaCo's settings (paper, Llama2-7B): layers merged at once, least interval between merges, first threshold.
LACO_LAYERS, LACO_INTERVAL, LACO_THRESHOLD, LACO_STEP = 4, 2, 0.65, 0.05


@dataclass
class Baseline:
    """One baseline, ready to measure: ``with transform.applied(model)`` and POP ``pop`` (skip 0: none).

    Attributes:
        method: One of :data:`METHODS`.
        ratio: The pruning ratio asked for (Wanda: its sparsity).
        transform: The model change for prefill and decode, or None (``shortgpt-gen``).
        pop: The prefill-only configuration (``PopConfig(skip=0)`` for the static methods).
        details: Removed layers, removal order, scores, calibration: JSON-serialisable.
    """

    method: str
    ratio: float
    transform: Transform | None
    pop: PopConfig = field(default_factory=lambda: PopConfig(skip=0))
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        if self.method in ("wanda", "width"):
            return f"{self.method} {round(100 * self.ratio)}%"
        return f"{self.method} -{len(self.details['removed'])}"

    def describe(self) -> dict[str, Any]:
        return {"method": self.method, "ratio": self.ratio, "pop": self.pop.to_dict(), **self.details}


def check_ratio(ratio: float, name: str = "`ratio`") -> None:
    """A pruning ratio (or Wanda's sparsity) is a number in (0, 1)."""
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio < 1:
        raise ConfigError(f"{name} must be in (0, 1), got {ratio!r}")


def layer_count(ratio: float, num_layers: int, method: str = "shortgpt") -> int:
    """k = round(ratio * L), checked against what ``method`` can remove."""
    check_ratio(ratio)
    k = round(ratio * num_layers)
    most = num_layers - 2 if method == "sleb" else num_layers - 1
    if not 1 <= k <= most:
        raise ConfigError(f"ratio {ratio} removes {k} of {num_layers} layers; {method} can remove 1 to {most}")
    return k


def _lowest(scores: list[float], k: int) -> list[int]:
    """Indices of the k lowest scores, lowest first (ties: lower index first)."""
    return sorted(range(len(scores)), key=lambda i: (scores[i], i))[:k]


def _above(total: int, layers: list[int]) -> tuple[int, ...]:
    """The original indices a removal takes away so that only ``layers`` (in order) are left."""
    return tuple(i for i in range(total) if i not in set(layers))


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
                with LayerRemoval(_above(total, kept[at + 1 :])).applied(model):
                    nll = calibration_nll(model, calib, [batch[at] for batch in inputs])
            if best is None or nll < best[0]:
                best = (nll, layer)
        assert best is not None
        removed.append(best[1])
        losses.append(best[0])
        if progress:
            progress(f"sleb: removed layer {best[1]} (calibration NLL {best[0]:.3f})")
    return removed, losses


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
            with LayerRemoval(_above(total, kept), replaced).applied(model):
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
                _above(total, candidate_kept),
                {**{i: m for i, m in replaced.items() if i in candidate_kept}, group[0]: merged},
            )
            if inputs is None:
                with candidate.applied(model):
                    similarity = float(torch.nn.functional.cosine_similarity(output(), reference, dim=-1).mean())
            else:  # from the merged layer's input, through it and the layers above
                tail = candidate_kept[pos:]
                start = LayerRemoval(_above(total, tail), {i: m for i, m in candidate.replaced.items() if i in tail})
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
    removal = LayerRemoval(_above(total, kept), replaced)
    return removal, {"merges": merges, "threshold": threshold, "layers_per_merge": layers, "interval": interval}


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


def build_baseline(model: "nn.Module", tokenizer: Any, method: str, ratio: float,
                   spec: CalibrationSpec | None = None, *,
                   progress: Callable[[str], None] | None = None, memo: dict[str, Any] | None = None) -> Baseline:
    """Build ``method`` at ``ratio`` (Wanda: ``ratio`` is its sparsity) for ``model``.

    ``memo`` (one dict per model and calibration) lets several ratios share work: SLEB's greedy order for k
    layers is the prefix of its order for more, so the longest order computed so far is reused.

    Raises:
        ConfigError: an unknown method or a ratio out of range.
        DataError: a calibration data directory without WikiText-2.
    """
    if method not in METHODS:
        raise ConfigError(f"unknown baseline {method!r}: use one of {', '.join(METHODS)}")
    num_layers = len(decoder_of(model).layers)
    if method == "width":
        from poptune.baselines.width import width_pruned

        check_ratio(ratio)
        swap = width_pruned(model, ratio)
        return Baseline(method, ratio, swap, details=swap.describe())
    if method == "wanda":
        check_ratio(ratio, "wanda's `ratio` (sparsity)")
    else:
        k = layer_count(ratio, num_layers, method)
    if method == "static-last":
        return Baseline(method, ratio, LayerRemoval(tuple(range(num_layers - k, num_layers))),
                        details={"removed": list(range(num_layers - k, num_layers)), "order": []})
    calib = calibration(model, tokenizer, spec or CalibrationSpec())
    details: dict[str, Any] = {"calibration": calib.describe()}
    if method == "wanda":
        transform = wanda_weights(model, calib, float(ratio))
        return Baseline(method, ratio, transform, details={**details, **transform.describe(), "removed": []})
    if method in ("shortgpt", "shortgpt-gen", "angular"):
        states = residual_stream(model, calib)
        if method == "angular":
            distances = angular_distances(states, k)
            start = _lowest(distances, 1)[0]
            removed = list(range(start, start + k))
            details.update(removed=removed, order=removed, scores=distances)
        else:
            scores = block_influence(states)
            order = _lowest(scores, k)
            details.update(removed=sorted(order), order=order, scores=scores)
        if method == "shortgpt-gen":
            pop = PopConfig(skip=k, boundary=boundary_registry.PRUNE_ALL, layers=tuple(sorted(order)))
            return Baseline(method, ratio, None, pop, details)
        return Baseline(method, ratio, LayerRemoval(tuple(details["removed"])), details=details)
    if method == "sleb":
        memo = {} if memo is None else memo
        if len(memo.get("sleb", ((), ()))[0]) < k:
            memo["sleb"] = sleb_order(model, calib, k, progress)
        order, losses = (list(x[:k]) for x in memo["sleb"])
        details.update(removed=sorted(order), order=order, nll=losses)
        return Baseline(method, ratio, LayerRemoval(tuple(sorted(order))), details=details)
    removal, info = laco_merges(model, calib, k, progress=progress)  # laco
    details.update(removed=list(removal.removed), order=[], **info)
    return Baseline(method, ratio, removal, details=details)
