"""``static-last``: remove the last k layers (prefill and decode)."""

from __future__ import annotations

from poptune.baselines.method import Baseline, BaselineMethod, Build
from poptune.baselines.surgery import LayerRemoval
from poptune.engine import decoder_of

__all__ = ["METHOD", "StaticLast"]


class StaticLast(BaselineMethod):
    name = "static-last"
    summary = "remove the last k layers (prefill and decode)"

    def build(self, build: Build) -> Baseline:
        assert build.k is not None
        total = len(decoder_of(build.model).layers)
        removed = list(range(total - build.k, total))
        return Baseline(self.name, build.ratio, LayerRemoval(tuple(removed)), details={"removed": removed, "order": []})


METHOD = StaticLast()
