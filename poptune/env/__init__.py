"""Gymnasium environments for POP tuning problems, registered when this package is imported.

``import poptune.env`` registers ``poptune/POP-<model>-v0`` for every registered model (keyword arguments of
``gymnasium.make`` are :class:`TuningProblem` fields) and ``poptune/POP-Replay-v0`` (a stored study, or with
``grid=PATH`` a grid file, ``noise=True`` to draw each answer from its recorded interval)::

    import gymnasium, poptune.env
    env = gymnasium.make("poptune/POP-gemma-3-270m-v0", tasks=("passkey",), lengths=(512,))
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step({"skip": 6, "boundary": 1, "offset": 0})
    replay = gymnasium.make("poptune/POP-Replay-v0", grid="leaderboards/grid-<model>-<hardware>.csv", noise=True)

The package is not imported by ``import poptune``, so the command line stays fast.
"""

from __future__ import annotations

import gymnasium

from poptune.env.pop_env import PopEnv, ReplayEnv
from poptune.problem.evaluator import ConfigEvaluator
from poptune.problem.problem import TuningProblem, reward
from poptune.problem.space import config_from_action
from poptune.store.measurement import Measurement

__all__ = [
    "ConfigEvaluator",
    "Measurement",
    "PopEnv",
    "ReplayEnv",
    "TuningProblem",
    "config_from_action",
    "env_ids",
    "reward",
]

NAMESPACE = "poptune"
REPLAY_ID = f"{NAMESPACE}/POP-Replay-v0"


def _model_env_ids() -> dict[str, str]:
    from poptune.models import model_names, resolve_model

    canonical = dict.fromkeys(resolve_model(name).name for name in model_names())
    return {f"{NAMESPACE}/POP-{name}-v0": name for name in canonical}


def env_ids() -> list[str]:
    """Every environment id poptune registers."""
    return [*_model_env_ids(), REPLAY_ID]


def _register() -> None:
    for env_id, model in _model_env_ids().items():
        if env_id not in gymnasium.registry:
            gymnasium.register(id=env_id, entry_point="poptune.env.pop_env:PopEnv", kwargs={"model": model})
    if REPLAY_ID not in gymnasium.registry:
        gymnasium.register(id=REPLAY_ID, entry_point="poptune.env.pop_env:ReplayEnv")


_register()
