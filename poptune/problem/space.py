"""POP's configuration space, defined once: the points a study searches, the environment's action space, the
enqueue checks.

A space is a model's ``num_layers`` and the K/V sources it searches (``kv``). Its points:

- ``skip`` in [0, L-1]; ``skip = 0`` is the full model and has no other parameter;
- for ``skip > 0``, ``offset`` in [0, min(:data:`MAX_OFFSET`, L-1-skip)] (final layers kept, the block
  ``[L-offset-skip, L-offset)`` always fits: :func:`max_offset_at`) and ``boundary`` in
  :data:`poptune.boundary.registry.NAMES`;
- the K/V sources of the space that differ at that skip (:func:`sources_at`, from
  :func:`poptune.kv.registry.distinct_at`: calibrated K/V of one skipped layer are its own), each once.

So no two points name one configuration. Every view of the space is made from these ranges: :func:`all_configs`
(the enumeration: the grid, the structured sampler, the replay's coverage), :func:`action_space` and
:func:`config_from_action` (the Gymnasium environment's view, ``kv`` included), :func:`check_enqueue` (a
configuration to measure first must be a point of the space), and Optuna's view -- what a trial asks and stores --
in the tuner's floor (:mod:`poptune.tune.params`). A configuration's own validity (a block the model has, a known
boundary and K/V source) is :meth:`~poptune.engine.PopConfig.check`'s, which every view defers to.

Nothing here imports Optuna; Gymnasium's spaces are built inside the function that returns them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from poptune.boundary import registry as boundary_registry
from poptune.engine import PopConfig
from poptune.errors import ConfigError
from poptune.kv import registry as kv_registry

if TYPE_CHECKING:
    from gymnasium import spaces

__all__ = [
    "MAX_OFFSET", "OWN", "action_of", "action_space", "all_configs", "check_enqueue", "config_from_action",
    "max_offset_at", "paper_default", "sources_at",
]

#: The search space's largest offset (final layers kept in prefill).
MAX_OFFSET = 2

#: The K/V sources of the paper's space (the default source alone).
OWN = (kv_registry.DEFAULT,)


def paper_default(num_layers: int) -> PopConfig:
    """The paper's fixed rule: skip the last third of the layers in prefill, boundary handling on."""
    return PopConfig(skip=round(num_layers / 3), boundary=boundary_registry.DEFAULT)


def max_offset_at(skip: int, num_layers: int) -> int:
    """The largest offset of the points at ``skip`` (the block always fits)."""
    return min(MAX_OFFSET, num_layers - 1 - skip)


def sources_at(skip: int, kv: tuple[str, ...]) -> tuple[str, ...]:
    """The K/V sources of the points at ``skip``: those of ``kv`` that differ there, each once (the registry's)."""
    return kv_registry.distinct_at(skip, kv)


def all_configs(num_layers: int, kv: tuple[str, ...] = OWN) -> list[PopConfig]:
    """Every configuration of the space, the full model first (``1 + 5 * sum of offsets`` of them with one
    K/V source; with ``own`` and ``calibrated``, twice as many for every skip from 2)."""
    configs = [PopConfig(skip=0)]
    for skip in range(1, num_layers):
        sources = sources_at(skip, kv)
        for offset in range(max_offset_at(skip, num_layers) + 1):
            configs += [PopConfig(skip=skip, boundary=b, offset=offset, kv=k)
                        for b in boundary_registry.NAMES for k in sources]
    return configs


def check_enqueue(configs: Sequence[PopConfig], num_layers: int, kv: tuple[str, ...] = OWN) -> None:
    """Refuse a configuration to enqueue that lies outside the space of a model with ``num_layers`` layers.

    Optuna would store it as a waiting trial whose parameters the sampler's distributions do not hold, and
    every later run of the study would trip over it; so it is refused before anything is written.
    """
    space = set(all_configs(num_layers, kv))
    for config in configs:
        if config not in space:
            label = config.label
            try:
                config.check(num_layers)
            except ConfigError as e:
                raise ConfigError(f"`--enqueue` item {label} is outside the search space: {e}") from e
            raise ConfigError(f"`--enqueue` item {label} ({config}) is outside the search space: boundary must be "
                              f"one of {', '.join(boundary_registry.NAMES)}, offset at most {MAX_OFFSET} and kv one of "
                              f"{', '.join(kv)}")


# -- the environment's view: an action is a dict of indices (or names)


def action_space(num_layers: int, kv: tuple[str, ...] = OWN, seed: int | None = None) -> "spaces.Dict":
    """The Gymnasium action space of the space: ``skip``, ``boundary`` (an index into
    :data:`poptune.boundary.registry.NAMES`), ``offset`` and ``kv`` (an index into ``kv``). ``skip`` is not bounded
    by the offset here: :func:`config_from_action` clips it, so that every action of the box is valid."""
    from gymnasium import spaces

    return spaces.Dict({"skip": spaces.Discrete(num_layers), "boundary": spaces.Discrete(len(boundary_registry.NAMES)),
                        "offset": spaces.Discrete(MAX_OFFSET + 1), "kv": spaces.Discrete(len(kv))}, seed=seed)


def action_of(config: PopConfig, kv: tuple[str, ...] = OWN) -> dict[str, int]:
    """The action of :func:`action_space` that names ``config`` (a point of the space of ``kv``)."""
    source = config.kv if config.kv in kv else kv[0]
    return {"skip": config.skip, "boundary": boundary_registry.NAMES.index(config.boundary), "offset": config.offset,
            "kv": kv.index(source)}


def _index(action: Mapping[str, Any], key: str, names: Sequence[str], default: str) -> str:
    value = action.get(key, default)
    if isinstance(value, str):
        if value not in names:
            raise ConfigError(f"`{key}` must be one of {', '.join(names)}, got {value!r}")
        return value
    try:
        index = int(value)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"`{key}` must be a name or an index, got {value!r}") from e
    if not 0 <= index < len(names):
        raise ConfigError(f"`{key}` index must be in [0, {len(names) - 1}], got {index}")
    return names[index]


def config_from_action(action: Mapping[str, Any], num_layers: int, kv: tuple[str, ...] = OWN) -> PopConfig:
    """A POP configuration from an action ``{"skip", "boundary", "offset"}`` and optionally ``"kv"``.

    ``boundary`` may be an index into :data:`poptune.boundary.registry.NAMES` or its name, ``kv`` an index into the
    space's sources ``kv`` or its name (default: the space's first). ``skip`` is clipped so that
    ``skip + offset <= L - 1``, ``skip=0`` is always the plain full model and a point that does not search the
    K/V source takes the space's (several actions then name one configuration; it is measured once). The
    configuration is checked by :meth:`~poptune.engine.PopConfig.check`.
    """
    unknown = sorted(map(str, set(action) - {"skip", "boundary", "offset", "kv"}))
    if unknown:  # a misspelt key ("offest") would otherwise be ignored and its default taken
        raise ConfigError(f"unknown action key(s) {', '.join(unknown)}: an action has skip, boundary, offset and kv")
    try:
        skip, offset = int(action["skip"]), int(action["offset"])
        action["boundary"]
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"an action needs integer `skip`, `offset` and a `boundary`, got {dict(action)!r}") from e
    boundary = _index(action, "boundary", boundary_registry.NAMES, "")
    if not 0 <= offset <= MAX_OFFSET:
        raise ConfigError(f"`offset` must be in [0, {MAX_OFFSET}], got {offset}")
    if not 0 <= skip <= num_layers - 1:
        raise ConfigError(f"`skip` must be in [0, {num_layers - 1}] for this model, got {skip}")
    source = _index(action, "kv", kv, kv[0])
    skip = min(skip, num_layers - 1 - offset)
    if skip == 0:
        return PopConfig(skip=0)  # nothing skipped: boundary, offset and kv change nothing, one full model
    config = PopConfig(skip=skip, boundary=boundary, offset=offset, kv=kv_registry.distinct_at(skip, (source,))[0])
    config.check(num_layers)
    return config
