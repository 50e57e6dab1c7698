"""Gymnasium environments: one POP tuning problem per environment, live or replayed from a stored study.

Both are one-step (contextual-bandit) environments: ``reset`` gives a fixed observation describing the
problem, ``step(action)`` measures (or looks up) one configuration and ends the episode (``terminated=True``).
The reward is :func:`poptune.problem.problem.reward`; ``info`` holds every objective and sub-measurement.
"""

from __future__ import annotations

import copy
import difflib
import math
from dataclasses import fields
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from poptune.errors import ConfigError
from poptune.problem.evaluator import ConfigEvaluator
from poptune.problem.problem import TuningProblem, reward
from poptune.problem.space import OWN, action_of, action_space, all_configs, config_from_action
from poptune.store.measurement import Measurement

__all__ = ["PopEnv", "ReplayEnv"]

#: The action's keys in the order an action given as integers (a NumPy array, a tuple) lists them.
_KEYS = ("skip", "boundary", "offset", "kv")


class _MeasuredActions(spaces.Dict):
    """The replay's action space: every action is valid (``contains``), but ``sample`` draws only actions whose
    configuration the stored study measured, so that random exploration (and Gymnasium's ``check_env``) gets
    answers from a study that is not a full grid."""

    def __init__(self, num_layers: int, kv: tuple[str, ...], actions: list[dict[str, int]],
                 seed: int | None = None) -> None:
        super().__init__(action_space(num_layers, kv).spaces, seed=seed)
        self.actions = actions

    def sample(self, mask: Any = None, probability: Any = None) -> dict[str, Any]:
        if mask is not None or probability is not None or not self.actions:
            return super().sample(mask=mask, probability=probability)
        action = self.actions[int(self.np_random.integers(len(self.actions)))]
        return {key: np.int64(value) for key, value in action.items()}


def _as_mapping(action: Any) -> Any:
    """A ``{"skip", "boundary", "offset"[, "kv"]}`` action, or one given as three or four integers (skip, boundary
    index, offset, K/V source index)."""
    if isinstance(action, dict) or hasattr(action, "keys"):
        return action
    values = np.asarray(action)
    if values.shape not in ((3,), (4,)) or not np.issubdtype(values.dtype, np.integer):
        raise ConfigError("an action is a dict {skip, boundary, offset, kv} or three or four integers (skip, boundary "
                          f"index, offset, K/V source index), got {action!r}")
    return {key: int(v) for key, v in zip(_KEYS, values)}


def _check_keywords(env: str, given: dict[str, Any], known: set[str]) -> None:
    """Refuse keywords ``env`` does not take (``gym.make(..., bogus=1)``) with a hint, not a bare TypeError."""
    for name in sorted(set(given) - known):
        hint = difflib.get_close_matches(name, sorted(known), n=1)
        raise ConfigError(f"{env} takes no argument {name!r}" + (f"; did you mean {hint[0]!r}?" if hint else
                                                                  f" (it takes {', '.join(sorted(known))})"))


def _observation_space() -> spaces.Box:
    # (number of layers, target prompt length): what a policy may condition on.
    return spaces.Box(low=0.0, high=np.float32(1e9), shape=(2,), dtype=np.float32)


class _OneStepEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, num_layers: int, target_length: int, max_drop: float | None,
                 kv: tuple[str, ...] = OWN) -> None:
        self.num_layers = num_layers
        self.max_drop = max_drop
        self.kv = kv
        self.action_space = action_space(num_layers, kv)
        self.observation_space = _observation_space()
        self._observation = np.array([num_layers, target_length], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None:
            self.action_space.seed(seed)
        return self._observation.copy(), {}

    def step(self, action: dict[str, Any]) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        config = config_from_action(_as_mapping(action), self.num_layers, self.kv)
        measurement = self._measure(config)
        info = copy.deepcopy(measurement.info())  # each step its own dict: a caller may change it
        return self._observation.copy(), float(reward(measurement, self.max_drop)), True, False, info

    def _measure(self, config: Any) -> Measurement:
        raise NotImplementedError


class PopEnv(_OneStepEnv):
    """Measures each action's configuration for real on this machine.

    Args:
        problem: The tuning problem (model, tasks, lengths, budget, ...); keyword arguments build one.
        evaluator: Share a :class:`ConfigEvaluator` (and its loaded model) between environments.
    """

    def __init__(self, problem: TuningProblem | None = None, *, evaluator: ConfigEvaluator | None = None,
                 **problem_kwargs: Any) -> None:
        if problem is None:
            _check_keywords("PopEnv", problem_kwargs, {f.name for f in fields(TuningProblem)})
            problem = TuningProblem(**problem_kwargs)
        elif problem_kwargs:
            raise ConfigError("give either a TuningProblem or its fields, not both")
        self.problem = problem
        self.evaluator = evaluator or ConfigEvaluator(problem)
        self._cache: dict[Any, Measurement] = {}
        super().__init__(self.evaluator.num_layers, self.evaluator.target_length, problem.max_drop, problem.kv)

    def _measure(self, config: Any) -> Measurement:
        if config not in self._cache:  # a configuration already measured is not re-run
            self._cache[config] = self.evaluator.evaluate(config)
        return self._cache[config]


class ReplayEnv(_OneStepEnv):
    """Answers ``step`` from a stored study or a grid file, without a model: tuners compared on CPU in seconds.

    Args:
        storage: A storage URL (see :mod:`poptune.store.studies`).
        study: The study name (default: the storage's only study).
        grid: A grid file (CSV, :mod:`poptune.problem.grid`) to replay instead of a storage: no database needed.
        max_drop: The reward's accuracy budget (default: the study's own).
        noise: Each step's answer drawn afresh from the recorded 95% intervals
            (:func:`poptune.problem.grid.draw`) with the environment's ``np_random``, so ``reset(seed=s)`` followed
            by the same actions gives the same answers; without, the recorded figures.

    Actions whose configuration the study never measured raise :class:`ConfigError`; a fully enumerated
    (grid) study answers every action. ``action_space.sample()`` draws only measured configurations. Configurations
    are read from what each trial measured (its ``config``), so studies made with the older, aliased search space
    replay the same. The action space is :func:`poptune.problem.space.action_space` (``skip``/``boundary``/``offset``
    with ``skip`` clipped, and ``kv``, an index into the replayed study's K/V sources), the same space the
    study searched (:mod:`poptune.problem.space`).
    """

    def __init__(self, storage: str | None = None, study: str | None = None, *, grid: str | None = None,
                 max_drop: float | None = None, noise: bool = False, **unknown: Any) -> None:
        from poptune.problem.replay import Replay

        _check_keywords("ReplayEnv", unknown, {"storage", "study", "grid", "max_drop", "noise"})
        if not isinstance(noise, bool):  # "yes" or "no" would both read as true
            raise ConfigError(f"`noise` must be True or False, got {noise!r}")
        if max_drop is not None and (isinstance(max_drop, bool) or not isinstance(max_drop, (int, float))
                                     or not math.isfinite(max_drop) or max_drop < 0):  # issue 87: "two" was taken
            raise ConfigError(f"`max_drop` must be accuracy points (a finite number >= 0) or None, got {max_drop!r}")

        if grid is not None:
            if storage is not None or study is not None:
                raise ConfigError("replay either a grid file or a stored study, not both")
            self._replay = Replay.from_csv(grid)
            target = next(iter(self._replay.table.values())).target_length
        else:
            self._replay, target = self._stored(storage, study)
        self.study_name = self._replay.study_name
        self.noise = noise
        self.table: dict[Any, Measurement] = self._replay.table  # trusted measurements first
        num_layers, kv = self._replay.num_layers, self._replay.kv
        super().__init__(num_layers, target, self._replay.max_drop if max_drop is None else max_drop, kv)
        space = set(all_configs(num_layers, kv))
        self.action_space = _MeasuredActions(num_layers, kv, [action_of(c, kv) for c in self.table if c in space])

    @staticmethod
    def _stored(storage: str | None, study: str | None) -> tuple[Any, int]:
        from poptune import store
        from poptune.problem.replay import Replay

        loaded = store.read_study(storage, study)
        replay = Replay.of(loaded)
        problem = TuningProblem.from_dict(store.StoredStudy.of(loaded).problem)
        # An image problem's prompt length is known from its measurements, not from the problem.
        target = next(iter(replay.table.values())).target_length if replay.table else problem.target
        return replay, target

    def _measure(self, config: Any) -> Measurement:
        return self._replay.answer(config, self.np_random if self.noise else None)
