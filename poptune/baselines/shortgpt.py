"""``shortgpt``: remove the k layers of lowest Block Influence (ShortGPT, arXiv 2403.03853)."""

from __future__ import annotations

from typing import Any

from poptune.baselines.method import Baseline, BaselineMethod, Build
from poptune.baselines.scores import block_influence
from poptune.baselines.surgery import LayerRemoval
from poptune.kvfit.calibration import residual_stream

__all__ = ["METHOD", "ShortGPT", "lowest", "lowest_influence"]


def lowest(scores: list[float], k: int) -> list[int]:
    """Indices of the k lowest scores, lowest first (ties: lower index first)."""
    return sorted(range(len(scores)), key=lambda i: (scores[i], i))[:k]


def lowest_influence(build: Build) -> dict[str, Any]:
    """The details of the k layers of lowest Block Influence on the calibration text: ``removed`` (sorted),
    ``order`` (lowest first), ``scores`` and the calibration."""
    assert build.k is not None
    calib = build.calibration()
    scores = block_influence(residual_stream(build.model, calib))
    order = lowest(scores, build.k)
    return {"calibration": calib.describe(), "removed": sorted(order), "order": order, "scores": scores}


class ShortGPT(BaselineMethod):
    name = "shortgpt"
    summary = "remove the k layers of lowest Block Influence (ShortGPT, arXiv 2403.03853)"

    def build(self, build: Build) -> Baseline:
        details = lowest_influence(build)
        return Baseline(self.name, build.ratio, LayerRemoval(tuple(details["removed"])), details=details)


METHOD = ShortGPT()
