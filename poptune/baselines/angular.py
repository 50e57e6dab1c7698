"""``angular``: remove the contiguous block of k layers with the smallest angular distance between its input and
output on the last token (Gromov et al., arXiv 2403.17887; no healing)."""

from __future__ import annotations

from poptune.baselines.method import Baseline, BaselineMethod, Build
from poptune.baselines.scores import angular_distances
from poptune.baselines.shortgpt import lowest
from poptune.baselines.surgery import LayerRemoval
from poptune.kvfit.calibration import residual_stream

__all__ = ["METHOD", "Angular"]


class Angular(BaselineMethod):
    name = "angular"
    summary = "remove the contiguous block of k layers of smallest angular distance (Gromov et al., 2403.17887)"

    def build(self, build: Build) -> Baseline:
        assert build.k is not None
        calib = build.calibration()
        distances = angular_distances(residual_stream(build.model, calib), build.k)
        start = lowest(distances, 1)[0]
        removed = list(range(start, start + build.k))
        details = {"calibration": calib.describe(), "removed": removed, "order": removed, "scores": distances}
        return Baseline(self.name, build.ratio, LayerRemoval(tuple(removed)), details=details)


METHOD = Angular()
