"""The one configuration space: its views (Optuna's, the environment's, the enqueue checks) name the same points."""

from __future__ import annotations

import numpy as np
import pytest

from poptune.engine import BOUNDARIES, PopConfig
from poptune.errors import ConfigError
from poptune.problem.space import (
    MAX_OFFSET,
    action_of,
    action_space,
    all_configs,
    check_enqueue,
    config_from_action,
)
from poptune.tune.params import distributions_of, params_of

KV = ("own", "calibrated")


@pytest.mark.parametrize("kv", [("own",), KV])
def test_every_view_names_the_same_points(kv):
    layers = 6
    configs = all_configs(layers, kv)
    assert len(set(configs)) == len(configs)
    space = action_space(layers, kv)
    assert set(space.spaces) == {"skip", "boundary", "offset", "kv"} and space["kv"].n == len(kv)
    for config in configs:
        action = action_of(config, kv)
        assert space.contains({k: np.int64(v) for k, v in action.items()})
        assert config_from_action(action, layers, kv) == config  # the environment's view
        params, distributions = params_of(config, kv), distributions_of(config, layers, kv)
        assert set(params) == set(distributions)  # Optuna's view: each parameter has its distribution
        assert all(distributions[k]._contains(distributions[k].to_internal_repr(v)) for k, v in params.items())
    check_enqueue(configs, layers, kv)  # the enqueue check takes every point


def test_actions_are_clipped_and_checked():
    # skip clipped to fit the offset; skip 0 is the full model whatever else; kv by name or index, ignored where
    # the space does not search it (one skipped layer has no map: its K/V is its own).
    assert config_from_action({"skip": 5, "boundary": "none", "offset": 2, "kv": 1}, 6, KV) == \
        PopConfig(3, "none", 2, kv="calibrated")
    assert config_from_action({"skip": 0, "boundary": 4, "offset": 2, "kv": 1}, 6, KV) == PopConfig(0)
    calibrated = {"skip": 1, "boundary": 1, "offset": 0, "kv": "calibrated"}
    assert config_from_action(calibrated, 6, KV) == PopConfig(1, "last")
    assert config_from_action({"skip": 3, "boundary": 1, "offset": 0}, 6, KV).kv == "own"  # default: the first
    for action, message in (({"skip": 1, "boundary": 0, "offset": 0, "kv": 2}, "`kv` index"),
                            ({"skip": 1, "boundary": 0, "offset": 0, "kv": "anchor?"}, "`kv` must be one of"),
                            ({"skip": 1, "boundary": len(BOUNDARIES), "offset": 0}, "`boundary` index"),
                            ({"skip": 1, "boundary": 0, "offset": MAX_OFFSET + 1}, "`offset` must be in"),
                            ({"skip": 1, "offset": 0}, "needs integer")):
        with pytest.raises(ConfigError, match=message):
            config_from_action(action, 6, KV)


def test_the_enqueue_check_refuses_what_the_space_lacks():
    with pytest.raises(ConfigError, match="outside the search space.*kv one of own"):
        check_enqueue((PopConfig(3, "last", kv="calibrated"),), 6, ("own",))
    with pytest.raises(ConfigError, match="outside the search space: `skip`"):
        check_enqueue((PopConfig(9, "last"),), 6)
