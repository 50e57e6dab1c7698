"""Whether a block's calibrated K/V maps beat the layers' own on held-out text: the fit's block-level check.

**What is scored.** A held-out window (a calibration window or prompt the fit did not see) is cut at up to
``points`` ends spread evenly over it, the last at its end, each leaving at least ``continuation`` tokens of
context. At each end the last ``continuation`` tokens are scored at full depth after the POP prefill of what
precedes them (:func:`continuation_nll`, boundary ``last``, as the project's likelihood scoring does), once
with the layers' own K/V and once with the maps. A window's value is calibrated minus own, averaged over its
ends: the window, not the end, is the unit, because the ends of one window share its text.

**The decision** (:func:`keep_maps`): the maps are kept only when a one-sided one-sample t-test of the
windows' values (Student, 1908; the p-value from :data:`scipy.stats.t`, as :func:`scipy.stats.ttest_1samp`
with ``alternative="less"`` gives it) rejects ``H0: E[calibrated - own] >= 0`` at level ``alpha`` (0.05 by default);
otherwise, or with fewer than
:data:`MIN_WINDOWS` windows, the block keeps its layers' own projections, and calibrated K/V are then the
paper's POP exactly. **Error rate**: where the maps are not better on the text the windows are drawn from, the
check keeps them with probability at most ``alpha``: exactly ``alpha`` at a true difference of 0 for normal
window values, less for symmetric heavy-tailed ones (both measured by a seeded simulation in
``tests/kvfit/test_check.py``). The test assumes the windows independent and alike; a study that fits several
blocks makes one such decision per block, each at ``alpha``. Maps that are better but not shown so (few
windows, a small gain) are ``undecided`` and the block keeps its layers' own: how often better maps are kept
(the power) grows with the windows and the gain.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from poptune.engine import PopConfig

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = ["ALPHA", "MIN_WINDOWS", "continuation_nll", "cut_ends", "keep_maps", "window_differences"]

#: Level of the one-sided test: the most often maps that are not better are kept.
ALPHA = 0.05

#: Fewest held-out windows the test is run on (fewer: the layers' own are kept).
MIN_WINDOWS = 3

METHOD = "one-sided one-sample t-test of per-window calibrated - own NLL (Student 1908; scipy.stats.t)"


def cut_ends(length: int, continuation: int, points: int) -> list[int]:
    """Up to ``points`` ends in ``(0, length]``, evenly spread, the last ``length``, each leaving a context of at
    least ``continuation`` tokens (so a window of ``2 * continuation`` tokens or fewer has one end)."""
    ends = sorted({round(length * j / points) for j in range(1, points + 1)} | {length})
    kept = [end for end in ends if end - continuation >= continuation]
    return kept or [length]


def continuation_nll(model: "nn.Module", config: PopConfig, ids: "torch.Tensor", continuation: int) -> list[float]:
    """Per row of ``ids`` (S, T): the mean NLL of its last ``continuation`` tokens, scored at full depth after
    the POP prefill of the first ``T - continuation`` (as the project's likelihood scoring does)."""
    import torch
    import torch.nn.functional as F

    from poptune.engine import apply_pop, stage

    context, target = ids[:, :-continuation], ids[:, -continuation:]
    with torch.inference_mode(), apply_pop(model, config):
        out = model(input_ids=context, use_cache=True)
        first = out.logits[:, -1:].float()  # (S, 1, V): the boundary token predicts the first target
        with stage(model, "decode"):
            rest = model(input_ids=target[:, :-1], cache=out.cache, use_cache=True).logits
    logits = torch.cat([first, rest.float()], dim=1)  # (S, m, V)
    nll = F.cross_entropy(logits.flatten(0, 1), target.flatten(), reduction="none").view(target.shape)
    return nll.mean(dim=1).tolist()


def window_differences(model: "nn.Module", own: PopConfig, calibrated: PopConfig, windows: Sequence["torch.Tensor"],
                       continuation: int, points: int) -> tuple[list[float], list[float]]:
    """Per window (every row of every ``(S, T)`` tensor of ``windows``): its NLL under ``own`` (the layers' own
    K/V) and under ``calibrated``, each averaged over its :func:`cut_ends`; the two lists, in the same order."""
    scores: tuple[list[float], list[float]] = ([], [])
    for ids in windows:
        ends = cut_ends(ids.shape[1], continuation, points)
        for scored, config in zip(scores, (own, calibrated)):
            per_end = [continuation_nll(model, config, ids[:, :end], continuation) for end in ends]
            scored += [sum(row) / len(row) for row in zip(*per_end)]
    return scores


def keep_maps(differences: Sequence[float], alpha: float = ALPHA) -> dict[str, Any]:
    """The check's decision on the windows' calibrated - own values: ``keep`` (the test rejects "not better" at
    ``alpha``), with the mean, the t statistic, the one-sided p-value and the verdict in words (``better``, or
    ``undecided``: not shown better, the layers' own are kept)."""
    from scipy import stats

    n = len(differences)
    mean = sum(differences) / n if n else math.nan
    if n < MIN_WINDOWS:
        t, p = math.nan, 1.0
    elif max(differences) == min(differences):  # no spread: the sign of the (constant) difference decides
        t, p = (-math.inf, 0.0) if mean < 0 else (math.inf if mean > 0 else math.nan, 1.0)
    else:
        sd = math.sqrt(sum((d - mean) ** 2 for d in differences) / (n - 1))
        t = mean / (sd / math.sqrt(n))
        p = float(stats.t.cdf(t, n - 1))  # P(T <= t) under H0: what ttest_1samp(alternative="less") returns
    keep = p < alpha
    return {"windows": n, "calibrated_minus_own": mean, "t": t, "p": p, "alpha": alpha, "keep": keep,
            "verdict": "better" if keep else "undecided", "method": METHOD}
