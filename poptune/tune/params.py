"""Optuna's view of POP's configuration space (:mod:`poptune.problem.space`): what a trial asks and stores.

The space itself -- its points, the enumeration, the environment's actions, the enqueue checks -- is the Optuna-free
:mod:`poptune.problem.space`; this module is its adapter to Optuna: :func:`suggest_config` (a trial asks for a point),
:func:`params_of` and :func:`distributions_of` (a configuration's trial parameters and their distributions, to
enqueue or create a trial) and :func:`config_of_trial` (what a stored trial measured).

A point's parameters: ``skip``; for ``skip > 0`` also ``offset`` and ``boundary``; and where the space's K/V sources
differ at that skip (:func:`poptune.problem.space.sources_at`), the K/V source: ``kv`` where every source of the
space differs, else a parameter named by the sources that do (``kv_own_anchor`` at skip 1 of
``own,calibrated,anchor``: Optuna keeps one set of choices per parameter). So no two points name one configuration
and no parameter is clipped. Studies made before the one-to-one space (``skip``, ``boundary`` and ``offset`` on every
trial, ``skip`` clipped) stay readable: a trial's configuration is read from its ``config`` user attribute, what was
measured. Optuna's distributions are imported inside the function that builds them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from poptune.boundary import registry as boundary_registry
from poptune.engine import PopConfig
from poptune.kv import registry as kv_registry
from poptune.problem.space import OWN, config_from_action, max_offset_at, sources_at
from poptune.store.trials import stored_config

if TYPE_CHECKING:
    import optuna

__all__ = ["config_of_trial", "distributions_of", "params_of", "suggest_config"]


def _kv_param(skip: int, kv: tuple[str, ...]) -> str | None:
    """The trial parameter naming the K/V source at ``skip`` (None: one source there, no parameter)."""
    sources = sources_at(skip, kv)
    if len(sources) < 2:
        return None
    return "kv" if sources == tuple(kv) else "_".join(("kv", *sources))


def suggest_config(trial: "optuna.Trial", num_layers: int, kv: tuple[str, ...] = OWN) -> PopConfig:
    """Ask ``trial`` for a point of the space and return its configuration (the parameters equal it)."""
    skip = trial.suggest_int("skip", 0, num_layers - 1)
    if skip == 0:
        return PopConfig(skip=0)
    offset = trial.suggest_int("offset", 0, max_offset_at(skip, num_layers))
    boundary = trial.suggest_categorical("boundary", list(boundary_registry.NAMES))
    param, sources = _kv_param(skip, kv), sources_at(skip, kv)
    source = trial.suggest_categorical(param, list(sources)) if param else sources[0]
    return PopConfig(skip=skip, boundary=boundary, offset=offset, kv=source)


def params_of(config: PopConfig, kv: tuple[str, ...] = OWN) -> dict[str, Any]:
    """The trial parameters of ``config`` (for ``enqueue_trial`` and ``create_trial``) in a space of ``kv``."""
    if config.skip == 0:
        return {"skip": 0}
    params = {"skip": config.skip, "offset": config.offset, "boundary": config.boundary}
    param = _kv_param(config.skip, kv)
    if param:
        params[param] = config.kv
    return params


def distributions_of(config: PopConfig, num_layers: int, kv: tuple[str, ...] = OWN) -> dict[str, Any]:
    """The distributions of :func:`params_of` as :func:`suggest_config` asks them."""
    from optuna.distributions import CategoricalDistribution, IntDistribution

    space: dict[str, Any] = {"skip": IntDistribution(0, num_layers - 1)}
    if config.skip:
        space["offset"] = IntDistribution(0, max_offset_at(config.skip, num_layers))
        space["boundary"] = CategoricalDistribution(list(boundary_registry.NAMES))
    param = _kv_param(config.skip, kv)
    if param:
        space[param] = CategoricalDistribution(list(sources_at(config.skip, kv)))
    return space


def config_of_trial(trial: "optuna.trial.FrozenTrial", num_layers: int) -> PopConfig | None:
    """What ``trial`` measured (its ``config`` attribute), else what its parameters name; None when its
    parameters are not all written yet (or it is not a POP trial)."""
    stored = stored_config(trial)
    if stored is not None:
        return stored
    params = {"kv" if name.startswith("kv_") else name: value for name, value in trial.params.items()}
    if params.get("skip") == 0:
        return PopConfig(skip=0)
    if {"skip", "boundary", "offset"} - set(params):
        return None
    # A trial still measuring, or an old study's (skip clipped).
    return config_from_action(params, num_layers, kv_registry.NAMES)
