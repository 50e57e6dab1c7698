"""The environment API refuses what it would otherwise ignore or misread (issue 57): an unknown action key, a
``noise`` that is not a bool, a keyword ``gym.make`` hands on that the environment does not take."""

from __future__ import annotations

import gymnasium
import pytest

from poptune.env import REPLAY_ID
from poptune.errors import ConfigError
from poptune.problem.space import config_from_action


def test_an_unknown_action_key_is_refused():
    with pytest.raises(ConfigError, match="unknown action key"):
        config_from_action({"skip": 2, "boundary": 0, "offset": 0, "offest": 1}, 6)
    assert config_from_action({"skip": 2, "boundary": 0, "offset": 0}, 6).skip == 2


@pytest.mark.parametrize("noise", ["yes", "no", 1, None])
def test_noise_must_be_a_bool(noise):
    with pytest.raises(ValueError, match="`noise` must be True or False"):
        gymnasium.make(REPLAY_ID, storage="sqlite:///nowhere/none.db", noise=noise)


def test_a_bad_keyword_to_make_is_a_clear_error_not_a_type_error():
    with pytest.raises(ConfigError, match="ReplayEnv takes no argument 'nosie'; did you mean 'noise'"):
        gymnasium.make(REPLAY_ID, storage="sqlite:///nowhere/none.db", nosie=True)
    with pytest.raises(ConfigError, match="PopEnv takes no argument 'max_dorp'; did you mean 'max_drop'"):
        gymnasium.make("poptune/POP-tiny-llama-v0", max_dorp=1.0)
