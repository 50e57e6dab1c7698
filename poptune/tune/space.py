"""POP's search space for Optuna, one point per configuration: what a trial's parameters say is what ran.

``skip`` in [0, L-1]; ``skip = 0`` is the full model and has no other parameter. For ``skip > 0`` the trial
also suggests ``offset`` in [0, min(2, L-1-skip)] (final layers kept, the block ``[L-offset-skip, L-offset)``
always fits) and ``boundary`` in :data:`~poptune.engine.BOUNDARIES`; for ``skip >= 2``, when the space has more
than one K/V source (``kv``: ``own``, ``calibrated``, see :mod:`poptune.kvmaps`), also ``kv`` (one skipped layer
has no map: its calibrated K/V is its own). So no two points name one configuration and no parameter is
clipped. Studies made before (``skip``, ``boundary`` and ``offset`` on every trial, ``skip``
clipped) stay readable: a trial's configuration is read from its ``config`` user attribute, what was measured.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from poptune.engine import BOUNDARIES, PopConfig
from poptune.store.trials import stored_config
from poptune.tune.problem import MAX_OFFSET, config_from_action

if TYPE_CHECKING:
    import optuna

__all__ = [
    "DEFAULT_SAMPLER", "SAMPLERS", "SpaceGridSampler", "all_configs", "config_of_trial", "distributions_of",
    "paper_default", "params_of", "suggest_config",
]


#: The samplers a study may use (:func:`poptune.tune.samplers.make_sampler`).
SAMPLERS = ("tpe", "nsga2", "random", "grid", "structured")
#: The study's default: the structure-aware search, which beat the others on the replay of the real grid
#: (best candidate and hypervolume after 8 and 16 trials, intervals apart: ``leaderboards/tuner-*``).
DEFAULT_SAMPLER = "structured"


def paper_default(num_layers: int) -> PopConfig:
    """The paper's fixed rule: skip the last third of the layers in prefill, boundary handling on."""
    return PopConfig(skip=round(num_layers / 3), boundary="last")


#: The K/V sources of the paper's space (``--kv own``).
OWN = ("own",)


def _max_offset(skip: int, num_layers: int) -> int:
    return min(MAX_OFFSET, num_layers - 1 - skip)


def _searches_kv(skip: int, kv: tuple[str, ...]) -> bool:
    return len(kv) > 1 and skip >= 2


def all_configs(num_layers: int, kv: tuple[str, ...] = OWN) -> list[PopConfig]:
    """Every configuration of the space, the full model first (``1 + 5 * sum of offsets`` of them with one
    K/V source; with ``own`` and ``calibrated``, twice as many for every skip from 2)."""
    configs = [PopConfig(skip=0)]
    for skip in range(1, num_layers):
        sources = kv if _searches_kv(skip, kv) else (kv[0] if skip >= 2 else "own",)
        for offset in range(_max_offset(skip, num_layers) + 1):
            configs += [PopConfig(skip=skip, boundary=b, offset=offset, kv=k) for b in BOUNDARIES for k in sources]
    return configs


def suggest_config(trial: "optuna.Trial", num_layers: int, kv: tuple[str, ...] = OWN) -> PopConfig:
    """Ask ``trial`` for a point of the space and return its configuration (the parameters equal it)."""
    skip = trial.suggest_int("skip", 0, num_layers - 1)
    if skip == 0:
        return PopConfig(skip=0)
    offset = trial.suggest_int("offset", 0, _max_offset(skip, num_layers))
    boundary = trial.suggest_categorical("boundary", list(BOUNDARIES))
    if _searches_kv(skip, kv):
        source = trial.suggest_categorical("kv", list(kv))
    else:
        source = kv[0] if skip >= 2 else "own"
    return PopConfig(skip=skip, boundary=boundary, offset=offset, kv=source)


def params_of(config: PopConfig, kv: tuple[str, ...] = OWN) -> dict[str, Any]:
    """The trial parameters of ``config`` (for ``enqueue_trial`` and ``create_trial``) in a space of ``kv``."""
    if config.skip == 0:
        return {"skip": 0}
    params = {"skip": config.skip, "offset": config.offset, "boundary": config.boundary}
    if _searches_kv(config.skip, kv):
        params["kv"] = config.kv
    return params


def distributions_of(config: PopConfig, num_layers: int, kv: tuple[str, ...] = OWN) -> dict[str, Any]:
    """The distributions of :func:`params_of` as :func:`suggest_config` asks them."""
    from optuna.distributions import CategoricalDistribution, IntDistribution

    space: dict[str, Any] = {"skip": IntDistribution(0, num_layers - 1)}
    if config.skip:
        space["offset"] = IntDistribution(0, _max_offset(config.skip, num_layers))
        space["boundary"] = CategoricalDistribution(list(BOUNDARIES))
    if _searches_kv(config.skip, kv):
        space["kv"] = CategoricalDistribution(list(kv))
    return space


def config_of_trial(trial: "optuna.trial.FrozenTrial", num_layers: int) -> PopConfig | None:
    """What ``trial`` measured (its ``config`` attribute), else what its parameters name; None when its
    parameters are not all written yet (or it is not a POP trial)."""
    stored = stored_config(trial)
    if stored is not None:
        return stored
    params = trial.params
    if params.get("skip") == 0:
        return PopConfig(skip=0)
    if {"skip", "boundary", "offset"} - set(params):
        return None
    return config_from_action(params, num_layers)  # a trial still measuring, or an old study's (skip clipped)


def SpaceGridSampler(num_layers: int, seed: int, kv: tuple[str, ...] = OWN  # noqa: N802 (a class factory)
                     ) -> "optuna.samplers.BaseSampler":
    """A grid over :func:`all_configs` in a seeded order: each trial takes the first configuration no trial of
    the study has yet; once all are taken, a seeded random one."""
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
