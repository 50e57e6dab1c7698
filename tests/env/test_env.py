"""Gymnasium environments: the live one passes check_env, the replay answers exactly what is stored."""

from __future__ import annotations

import gymnasium
import optuna
import pytest
from gymnasium.utils.env_checker import check_env

import poptune.env
from poptune import ConfigError, MeasurementError, PopConfig, store
from poptune.env import Measurement, PopEnv, ReplayEnv, TuningProblem, config_from_action, reward
from poptune.tune.study import StudySpec, run_study

from ..tune.fakes import FakeEvaluator, quiet_timing  # noqa: F401  (the fixture is autouse: no real A/A pairs)

optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.fixture(scope="module")
def problem(eval_data):
    return TuningProblem(model="tiny-llama", tasks=("piqa",), limit=4, data_dir=str(eval_data), lengths=(16,),
                         repeats=1, decode_tokens=0, max_drop=1.0, precision=None)


def test_ids_are_registered():
    ids = poptune.env.env_ids()
    assert "poptune/POP-gemma-3-270m-v0" in ids and "poptune/POP-Replay-v0" in ids
    assert all(env_id in gymnasium.registry for env_id in ids)


def test_check_env_and_step(problem):
    env = gymnasium.make("poptune/POP-tiny-llama-v0", **{k: v for k, v in problem.to_dict().items() if k != "model"})
    check_env(env.unwrapped)
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs) and info == {}
    obs, r, terminated, truncated, info = env.step({"skip": 3, "boundary": 1, "offset": 0})
    assert terminated and not truncated
    assert info["config"] == {"skip": 3, "boundary": "last", "offset": 0}
    assert r == pytest.approx(reward(Measurement.from_info(info), 1.0))
    assert {"speedup", "prefill_ms", "accuracy", "drop_points", "latency", "hardware"} <= set(info)


def test_actions_map_to_configurations():
    assert config_from_action({"skip": 5, "boundary": "none", "offset": 2}, 6) == PopConfig(3, "none", 2)
    assert config_from_action({"skip": 0, "boundary": 4, "offset": 2}, 6) == PopConfig(0)
    with pytest.raises(ConfigError, match="`boundary` index"):
        config_from_action({"skip": 1, "boundary": 9, "offset": 0}, 6)
    with pytest.raises(ConfigError, match="`skip` must be in"):
        config_from_action({"skip": 6, "boundary": 1, "offset": 0}, 6)


def test_reward_penalises_beyond_budget():
    base = dict(config=PopConfig(2), latency={16: {"pop_ms": 1.0, "full_ms": 1.5, "speedup": 1.5, "ideal": 1.6}},
                target_length=16, full_accuracy={"piqa": 0.60})
    within = Measurement(accuracy={"piqa": 0.595}, **base)
    beyond = Measurement(accuracy={"piqa": 0.55}, **base)
    assert reward(within, 1.0) == pytest.approx(1.5)
    assert reward(beyond, 1.0) == pytest.approx(1.5 - 0.5 * 4.0)
    assert reward(beyond, None) == pytest.approx(1.5)
    with pytest.raises(MeasurementError, match="not finite"):
        Measurement(accuracy={"piqa": float("nan")}, **base)


def test_replay_returns_exactly_the_stored_objectives(problem, tmp_path):
    url = f"sqlite:///{tmp_path}/s.db"
    # What is replayed is what was stored, whatever it was: a synthetic evaluator stores it (no model, no timing).
    study = run_study(StudySpec(problem=problem, trials=3, storage=url, sampler="random", seed=2),
                      evaluator=FakeEvaluator(problem))
    env = gymnasium.make("poptune/POP-Replay-v0", storage=url)
    obs, _ = env.reset(seed=1)
    assert env.observation_space.contains(obs)
    for trial in store.completed(study):
        config = trial.user_attrs["config"]
        _, r, terminated, _, info = env.step(config)
        assert terminated
        assert info["accuracy_mean"] == trial.values[1]
        assert study.user_attrs["reference_prefill_ms"] / info["speedup"] == trial.values[0]
        assert info["prefill_ms"] == trial.user_attrs["prefill_ms"]
        assert info["speedup"] == trial.user_attrs["speedup"]
        assert r == reward(Measurement.from_info(trial.user_attrs), problem.max_drop)
    with pytest.raises(ConfigError, match="holds no measurement"):
        ReplayEnv(url).step({"skip": 5, "boundary": "window-64", "offset": 0})


def test_live_env_measures_a_configuration_once(problem):
    env = PopEnv(problem)
    calls = []
    original = env.evaluator.evaluate
    env.evaluator.evaluate = lambda config: calls.append(config) or original(config)
    env.reset(seed=0)
    first = env.step({"skip": 2, "boundary": 1, "offset": 0})[4]
    again = env.step({"skip": 2, "boundary": "last", "offset": 0})[4]
    assert calls == [PopConfig(2)] and first == again
