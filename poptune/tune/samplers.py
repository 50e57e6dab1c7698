"""Samplers by name: what ``--sampler`` and the tuner table's rows mean (:data:`SAMPLERS`), and the grid sampler."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from poptune.engine import PopConfig
from poptune.problem.space import OWN, all_configs
from poptune.tune.params import config_of_trial, params_of

if TYPE_CHECKING:
    import optuna

__all__ = ["DEFAULT_SAMPLER", "SAMPLERS", "SpaceGridSampler", "make_sampler"]

#: The samplers a study may use (:func:`make_sampler`).
SAMPLERS = ("tpe", "nsga2", "random", "grid", "structured")
#: The study's default: the structure-aware search, which beat the others on the replay of the real grid
#: (best candidate and hypervolume after 8 and 16 trials, intervals apart: ``leaderboards/tuner-*``).
DEFAULT_SAMPLER = "structured"


def make_sampler(name: str, seed: int, num_layers: int, kv: tuple[str, ...] = OWN, *,
                 max_drop: float | None = None, ideal: Mapping[PopConfig, float] | None = None,
                 objectives: tuple[str, ...] | None = None) -> "optuna.samplers.BaseSampler":
    """A seeded sampler (:data:`SAMPLERS`, or ``gp``: Optuna's Gaussian-process sampler, for the replay's tuner
    table); the accuracy budget reaches TPE, NSGA-II and GP through ``trial.set_constraint``. ``structured``
    (:class:`~poptune.tune.structured.StructuredSampler`) also takes the budget ``max_drop`` (else it reads it
    from the trials' constraints), the configurations' ``ideal`` speedups (else a model-free proxy) and the
    study's ``objectives`` (default TTFT and accuracy)."""
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

        options: dict[str, Any] = {"objectives": objectives} if objectives else {}
        return StructuredSampler(num_layers, kv=kv, max_drop=max_drop, ideal=ideal, seed=seed, **options)
    return SpaceGridSampler(num_layers, seed, kv)


def SpaceGridSampler(num_layers: int, seed: int, kv: tuple[str, ...] = OWN  # noqa: N802 (a class factory)
                     ) -> "optuna.samplers.BaseSampler":
    """A grid over :func:`~poptune.problem.space.all_configs` in a seeded order: each trial takes the first
    configuration no trial of the study has yet; once all are taken, a seeded random one."""
    import optuna

    class _Grid(optuna.samplers.BaseSampler):
        def __init__(self) -> None:
            self._order = all_configs(num_layers, kv)
            random.Random(seed).shuffle(self._order)
            self._rng = random.Random(seed + 1)
            self._picked: dict[int, dict[str, Any]] = {}

        def infer_relative_search_space(self, study: Any, trial: Any) -> dict[str, Any]:
            return {}

        def sample_relative(self, study: Any, trial: Any, search_space: dict[str, Any]) -> dict[str, Any]:
            return {}

        def _pick(self, study: Any, trial: Any) -> dict[str, Any]:
            if trial.number not in self._picked:
                taken = {config_of_trial(t, num_layers) for t in study.get_trials(deepcopy=False)
                         if t.number != trial.number}
                free = [c for c in self._order if c not in taken]
                self._picked[trial.number] = params_of(free[0] if free else self._rng.choice(self._order), kv)
            return self._picked[trial.number]

        def sample_independent(self, study: Any, trial: Any, param_name: str, param_distribution: Any) -> Any:
            return self._pick(study, trial)[param_name]

    return _Grid()
