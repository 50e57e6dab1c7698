"""Samplers by name: what ``--sampler`` and the tuner table's rows mean (:data:`~poptune.tune.space.SAMPLERS`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from poptune.engine import PopConfig
from poptune.tune.space import OWN, SpaceGridSampler

if TYPE_CHECKING:
    import optuna

__all__ = ["make_sampler"]


def make_sampler(name: str, seed: int, num_layers: int, kv: tuple[str, ...] = OWN, *,
                 max_drop: float | None = None, ideal: Mapping[PopConfig, float] | None = None
                 ) -> "optuna.samplers.BaseSampler":
    """A seeded sampler (:data:`~poptune.tune.space.SAMPLERS`, or ``gp``: Optuna's Gaussian-process sampler,
    for the replay's tuner table); the accuracy budget reaches TPE, NSGA-II and GP through
    ``trial.set_constraint``. ``structured`` (:class:`~poptune.tune.structured.StructuredSampler`) also takes
    the budget ``max_drop`` (else it reads it from the trials' constraints) and the configurations' ``ideal``
    speedups (else a model-free proxy)."""
    import optuna

    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "gp":  # the replay's tuner table only: needs torch and scipy
        return optuna.samplers.GPSampler(seed=seed, warn_independent_sampling=False)
    if name == "structured":
        from poptune.tune.structured import StructuredSampler

        return StructuredSampler(num_layers, kv=kv, max_drop=max_drop, ideal=ideal, seed=seed)
    return SpaceGridSampler(num_layers, seed, kv)
