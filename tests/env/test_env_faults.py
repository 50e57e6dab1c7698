"""Gymnasium contract details: fresh info dicts, array actions, a replay of a partial study passes check_env."""

from __future__ import annotations

import numpy as np
import optuna
import pytest
from gymnasium.utils.env_checker import check_env

from poptune import ConfigError, PopConfig
from poptune.env import Measurement, ReplayEnv, TuningProblem

optuna.logging.set_verbosity(optuna.logging.WARNING)

CONFIGS = (PopConfig(skip=0), PopConfig(skip=2, boundary="last"), PopConfig(skip=3, boundary="none", offset=1))


def _measurement(config: PopConfig, speedup: float) -> Measurement:
    return Measurement(config=config, target_length=16, accuracy={"passkey": 0.5}, full_accuracy={"passkey": 0.5},
                       latency={16: {"pop_ms": 1.0 / speedup, "full_ms": 1.0, "speedup": speedup, "ideal": speedup}})


@pytest.fixture
def partial_study(tmp_path) -> str:
    """A stored study of 3 of the 6-layer model's 46 configurations (not a grid), without any model."""
    url = f"sqlite:///{tmp_path}/partial.db"
    study = optuna.create_study(storage=url, study_name="partial", directions=["minimize", "maximize"])
    problem = TuningProblem(model="tiny-llama", max_drop=None, tasks=("passkey",), lengths=(16,))
    study.set_user_attr("problem", problem.to_dict())
    study.set_user_attr("num_layers", 6)
    for i, config in enumerate(CONFIGS):
        info = _measurement(config, 1.0 + i / 10).info()
        study.add_trial(optuna.trial.create_trial(values=[1.0 / (1 + i / 10), 0.5], user_attrs=info))
    return url


def test_replay_of_a_partial_study_passes_check_env(partial_study):
    env = ReplayEnv(partial_study)
    check_env(env)
    env.reset(seed=3)
    for _ in range(20):  # sampled actions are the measured ones
        _, _, terminated, _, info = env.step(env.action_space.sample())
        assert terminated and PopConfig.from_dict(info["config"]) in CONFIGS
    with pytest.raises(ConfigError, match="holds no measurement"):
        env.step({"skip": 5, "boundary": 0, "offset": 0})


def test_consecutive_steps_do_not_share_info(partial_study):
    env = ReplayEnv(partial_study)
    env.reset(seed=0)
    action = {"skip": 2, "boundary": 1, "offset": 0}
    first = env.step(action)[4]
    first["latency"]["16"]["speedup"] = -1.0  # a caller changing its info ...
    first["accuracy"]["passkey"] = -1.0
    second = env.step(action)[4]
    assert second is not first and second["latency"]["16"]["speedup"] == pytest.approx(1.1)  # ... changes no other
    assert second["accuracy"]["passkey"] == 0.5


def test_an_action_of_three_integers_is_accepted(partial_study):
    env = ReplayEnv(partial_study)
    env.reset(seed=0)
    info = env.step(np.array([3, 0, 1]))[4]
    assert info["config"] == {"skip": 3, "boundary": "none", "offset": 1}
    assert env.step((2, 1, 0))[4]["config"] == {"skip": 2, "boundary": "last", "offset": 0}
    assert env.step((2, 1, 0, 0))[4]["config"] == {"skip": 2, "boundary": "last", "offset": 0}  # kv: own
    for bad in (np.array([1.5, 0.0, 0.0]), np.array([1, 2]), np.array([1, 2, 0, 0, 0]), "skip"):
        with pytest.raises(ConfigError, match="three or four integers"):
            env.step(bad)


def test_the_action_space_holds_the_kv_sources_the_study_measured(tmp_path):
    url = f"sqlite:///{tmp_path}/kv.db"
    study = optuna.create_study(storage=url, study_name="kv", directions=["minimize", "maximize"])
    problem = TuningProblem(model="tiny-llama", max_drop=None, tasks=("passkey",), lengths=(16,),
                            kv=("own", "calibrated"))
    study.set_user_attr("problem", problem.to_dict())
    study.set_user_attr("num_layers", 6)
    calibrated = PopConfig(skip=3, boundary="last", kv="calibrated")
    for i, config in enumerate((*CONFIGS, calibrated)):
        info = _measurement(config, 1.0 + i / 10).info()
        study.add_trial(optuna.trial.create_trial(values=[1.0 / (1 + i / 10), 0.5], user_attrs=info))
    env = ReplayEnv(url)
    assert env.action_space["kv"].n == 2
    env.reset(seed=0)
    assert env.step({"skip": 3, "boundary": 1, "offset": 0, "kv": 1})[4]["config"]["kv"] == "calibrated"
    assert env.step(np.array([3, 1, 0, 1]))[4]["speedup"] == pytest.approx(1.3)
    sampled = {PopConfig.from_dict(env.step(env.action_space.sample())[4]["config"]) for _ in range(40)}
    assert calibrated in sampled and sampled <= {*CONFIGS, calibrated}
