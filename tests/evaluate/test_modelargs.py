"""The lm-eval route checks the ``poptune`` model's ``--model_args`` before lm-eval starts (poptune.evaluate.modelargs),
refusing what PopLM would refuse after lm-eval's task index, and passing everything else to lm-eval untouched."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from poptune.engine import PopConfig
from poptune.errors import ConfigError, ModelNotFoundError, PoptuneError
from poptune.evaluate.modelargs import check_model_args, pop_config

ROOT = Path(__file__).resolve().parents[2]


def _argv(model_args: str, model: str = "poptune", joined: bool = False) -> list[str]:
    if joined:
        return ["run", f"--model={model}", f"--model_args={model_args}", "--tasks", "piqa"]
    return ["run", "--model", model, "--model_args", model_args, "--tasks", "piqa"]


@pytest.mark.parametrize("model_args, error", [
    ("pretrained=no-such-model,skip=1", ModelNotFoundError),
    ("pretrained=tiny-llama,layers=1-y", ConfigError),
    ("pretrained=tiny-llama,skip=two", ConfigError),
    ("pretrained=tiny-llama,skip=3,boundary=window", ConfigError),
    ("pretrained=tiny-llama,skip=3,kv=no-such-source", ConfigError),
    ("pretrained=tiny-llama,skip=-1", ConfigError),
])
@pytest.mark.parametrize("joined", [False, True])
def test_a_bad_poptune_model_argument_is_refused_before_lm_eval(model_args, error, joined):
    with pytest.raises(error):
        check_model_args(_argv(model_args, joined=joined))


def test_the_short_options_and_several_values_are_read_as_lm_eval_reads_them():
    with pytest.raises(ModelNotFoundError):
        check_model_args(["run", "-M", "poptune", "-a", "skip=1", "pretrained=no-such-model", "--tasks", "piqa"])
    with pytest.raises(ConfigError):  # the later value wins
        check_model_args(["run", "--model", "poptune", "-a", "skip=3", "--model_args=skip=x"])


@pytest.mark.parametrize("argv", [
    _argv("pretrained=tiny-llama,skip=3,boundary=window-4,offset=1,batch_size=4,dtype=float32"),
    _argv("pretrained=gemma-3,layers=9-10-11,kv=own", joined=True),
    _argv("pretrained=no-such-model,skip=1", model="hf"),  # another model's arguments are lm-eval's
    _argv('{"pretrained": "no-such-model"}'),  # a JSON object: lm-eval reads it
    ["run", "--model", "poptune", "--tasks", "piqa"],  # no arguments: PopLM's defaults
    # lm-eval's other forms: -M and -a, several key=val values, the option given twice (merged, later keys win):
    # kv=anchor alone would need skip >= 1, so only the merged arguments are checked
    ["run", "-M", "poptune", "-a", "kv=anchor", "skip=6", "--tasks", "piqa"],
    ["run", "--model", "poptune", "--model_args", "kv=calibrated", "--limit", "2", "-a", "pretrained=gemma-3,skip=6"],
    ["run", "--model", "poptune", "--model_args", "skip=x", "skip=3"],
])
def test_good_or_foreign_arguments_pass(argv):
    check_model_args(argv)


def test_a_local_model_directory_passes(tmp_path):
    check_model_args(_argv(f"pretrained={tmp_path},skip=1"))


def test_the_configuration_is_what_poplm_builds():
    assert pop_config("6", "window-64", "1") == PopConfig(skip=6, boundary="window-64", offset=1)
    assert pop_config(layers="3-5") == PopConfig(skip=2, layers=(3, 5))
    assert pop_config(3, None) == PopConfig(skip=3, boundary="none")  # lm-eval's reading of `boundary=none`


def test_the_route_refuses_at_once_in_one_line():
    """The command itself: one line, exit code 2, and no lm-eval import (its task index took about 20 s here)."""
    code = ("import sys, runpy; sys.argv = ['lm_eval', 'run', '--model', 'poptune', '--model_args', "
            "'pretrained=no-such-model,skip=1', '--tasks', 'piqa']\n"
            "try:\n    runpy.run_module('poptune.evaluate.harness', run_name='__main__')\n"
            "finally:\n    print('lm_eval' in sys.modules, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()] and "unknown model 'no-such-model'" in done.stderr
    assert done.stdout.split() == ["False", "False"]
    assert issubclass(ModelNotFoundError, PoptuneError)


def test_poplm_takes_the_none_boundary_as_lm_eval_hands_it_over():
    """lm-eval reads `boundary=none` as None; PopLM refused it (`got 'None'`) before the arguments were read here."""
    from poptune.evaluate.lm import PopLM

    lm = PopLM.create_from_arg_string("pretrained=tiny-llama,skip=1,boundary=none", {"device": "cpu"})
    assert lm.pop_config == PopConfig(skip=1, boundary="none")
