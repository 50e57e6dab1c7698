"""Optuna's view of the configuration space (:mod:`poptune.tune.params`): a suggested trial is a point of it."""

from __future__ import annotations

import optuna

from poptune.problem.space import all_configs
from poptune.tune.params import params_of, suggest_config

KV = ("own", "calibrated")


def test_a_suggested_trial_is_a_point_of_the_space():
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = set()
    for _ in range(60):
        trial = study.ask()
        config = suggest_config(trial, 6, KV)
        assert config in all_configs(6, KV) and trial.params == params_of(config, KV)
        seen.add(config.kv)
        study.tell(trial, 0.0)
    assert seen == set(KV)  # the K/V source is searched
