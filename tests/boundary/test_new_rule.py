"""Issue 88's "done when" for boundaries: a new rule is one module and one registry line. A rule registered at test
time (here a throwaway ``pair``: the last two prompt tokens at full depth) is run by the engine, offered by the
Gymnasium action space, searched by Optuna and sampled by the structured sampler in its contract's order, and
measured by a study, with none of them touched."""

from __future__ import annotations

import optuna
import pytest
import torch

from poptune.boundary import registry
from poptune.boundary.rule import BoundaryRule
from poptune.engine import PopConfig, apply_pop
from poptune.env import TuningProblem
from poptune.problem.space import action_space, all_configs, config_from_action
from poptune.tune.params import suggest_config
from poptune.tune.structured import StructuredSampler, proxy_ideal
from poptune.tune.study import StudySpec, run_study

from ..tune.fakes import FakeEvaluator, quiet_timing  # noqa: F401  (the fixture is autouse)

optuna.logging.set_verbosity(optuna.logging.WARNING)

PAIR = BoundaryRule("pair", 2)


@pytest.fixture(autouse=True)
def registered(monkeypatch):
    """The registry line a new rule adds, added for the test's time only."""
    monkeypatch.setattr(registry, "RULES", (*registry.RULES, PAIR))
    monkeypatch.setattr(registry, "NAMES", (*registry.NAMES, PAIR.name))


def test_a_configuration_takes_it_and_the_engine_runs_it(shared):
    config = PopConfig(skip=2, boundary="pair")
    assert config.boundary_width == 2 and config.label == "2/pair/0"
    assert PopConfig.parse("2/pair/0", "--pop") == config
    model, tok = shared("tiny-llama")
    inputs = tok(["a prompt of some tokens to prune"], return_tensors="pt")
    with torch.no_grad(), apply_pop(model, config):
        pair = model(**inputs).logits
    with torch.no_grad(), apply_pop(model, PopConfig(skip=2, boundary="window-2")):
        window = model(**inputs).logits
    assert pair.shape[1] == 2  # the two positions that ran at full depth
    torch.testing.assert_close(pair, window)  # the contract's two tokens: what a window of two runs


def test_the_action_space_offers_it():
    space = action_space(6)
    assert space["boundary"].n == len(registry.NAMES) == 6
    assert config_from_action({"skip": 2, "boundary": 5, "offset": 0}, 6) == PopConfig(skip=2, boundary="pair")
    assert PopConfig(skip=2, boundary="pair") in all_configs(6)


def test_the_structured_sampler_orders_it_by_its_width_and_samples_it():
    sampler = StructuredSampler(3, seed=0)
    assert sampler._order.index("pair") == sampler._order.index("last") + 1  # by width, not by its place last
    assert proxy_ideal(PopConfig(2, "last"), 3) > proxy_ideal(PopConfig(2, "pair"), 3) > proxy_ideal(
        PopConfig(2, "window-4"), 3)
    study = optuna.create_study(directions=["minimize", "maximize"], sampler=sampler)

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        config = suggest_config(trial, 3)
        return 100.0 / proxy_ideal(config, 3), 0.6 - 0.01 * config.skip

    configs = all_configs(3)
    study.optimize(objective, n_trials=len(configs))
    sampled = {PopConfig.from_dict({k: v for k, v in t.params.items()}) for t in study.trials}
    assert "pair" in {c.boundary for c in sampled} and sampled == set(configs)


def test_a_study_measures_it(tmp_path):
    problem = TuningProblem(model="tiny-llama", tasks=("piqa",), lengths=(16,), decode_tokens=8, max_drop=None)
    study = run_study(StudySpec(problem=problem, storage=f"sqlite:///{tmp_path}/s.db", trials=3, sampler="random",
                                enqueue=(PopConfig(skip=3, boundary="pair"),)), evaluator=FakeEvaluator(problem))
    measured = [PopConfig.from_dict(t.user_attrs["config"]) for t in study.trials if "config" in t.user_attrs]
    assert PopConfig(skip=3, boundary="pair") in measured
