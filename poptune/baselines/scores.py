"""Layer-redundancy metrics on the residual stream (pure functions of hidden states and weights).

``states`` is (L + 1, S, T, C): the input of every layer and the output of the last one
(:func:`poptune.kvfit.calibration.residual_stream`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["block_influence", "angular_distances", "wanda_prune"]


def block_influence(states: "torch.Tensor") -> list[float]:
    """ShortGPT's Block Influence (arXiv 2403.03853): ``BI_i = 1 - mean over tokens of cos(x_i, x_{i+1})``.

    ``x_i`` is layer i's input, ``x_{i+1}`` its output; a layer that returns its input has BI 0.
    """
    import torch

    cos = torch.nn.functional.cosine_similarity(states[:-1], states[1:], dim=-1)  # (L, S, T)
    return [1.0 - float(c) for c in cos.flatten(1).mean(dim=1)]


def angular_distances(states: "torch.Tensor", n: int) -> list[float]:
    """Gromov et al. (arXiv 2403.17887): ``d(l, l + n) = arccos(cos(x_l, x_{l+n})) / pi`` on the last token.

    Entry ``l`` (for ``l`` in ``[0, L - n]``) is the distance between the input of layer ``l`` and the output of
    layer ``l + n - 1``, averaged over samples: small means the block ``[l, l + n)`` changes little.
    """
    import torch

    last = states[:, :, -1]  # (L + 1, S, C)
    layers = last.shape[0] - 1
    if not 1 <= n <= layers:
        raise ValueError(f"block size must be in [1, {layers}], got {n}")
    cos = torch.nn.functional.cosine_similarity(last[: layers + 1 - n], last[n:], dim=-1)  # (L + 1 - n, S)
    return [float(d) for d in (torch.arccos(cos.clamp(-1.0, 1.0)) / math.pi).mean(dim=1)]


def wanda_prune(weight: "torch.Tensor", input_norm: "torch.Tensor", sparsity: float) -> "torch.Tensor":
    """Wanda (arXiv 2306.11695): zero the ``sparsity`` fraction of each output row with the lowest |W| * ||X||.

    Args:
        weight: (out, in) weights.
        input_norm: (in,) L2 norm of each input feature over the calibration tokens.
        sparsity: Fraction of each row set to zero, in [0, 1).

    Returns:
        A pruned copy of ``weight``.
    """
    import torch

    if not 0 <= sparsity < 1:
        raise ValueError(f"sparsity must be in [0, 1), got {sparsity}")
    score = weight.abs().float() * input_norm.float().unsqueeze(0)  # (out, in)
    count = int(weight.shape[1] * sparsity)
    pruned = weight.clone()
    if count:
        lowest = torch.sort(score, dim=1, stable=True).indices[:, :count]  # (out, count)
        pruned.scatter_(1, lowest, 0)
    return pruned
