"""``shortgpt-gen``: ShortGPT's prefill-only variant: the k lowest-BI layers are skipped in prefill with their K/V
still written (POP's engine with an explicit layer set), no boundary handling; decode is full."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from poptune.baselines.method import Baseline, BaselineMethod, Build
from poptune.baselines.shortgpt import lowest_influence
from poptune.boundary import registry as boundary_registry
from poptune.engine import PopConfig

__all__ = ["METHOD", "ShortGPTGen"]


class ShortGPTGen(BaselineMethod):
    name = "shortgpt-gen"
    summary = "skip the k lowest-BI layers in prefill only, their K/V still written; decode is full"
    removes_layers = False

    def build(self, build: Build) -> Baseline:
        details = lowest_influence(build)
        pop = PopConfig(skip=len(details["order"]), boundary=boundary_registry.PRUNE_ALL,
                        layers=tuple(details["removed"]))
        return Baseline(self.name, build.ratio, None, pop, details)

    def label(self, details: Mapping[str, Any], num_layers: int) -> tuple[str, float]:
        removed = details.get("removed", [])
        return f"{len(removed)} skipped in prefill: {','.join(map(str, removed))}", len(removed) / num_layers


METHOD = ShortGPTGen()
