"""The K/V source registry (issue 48): one list of sources, and everything that names one asks it."""

from __future__ import annotations

import optuna
import pytest

from poptune.engine import PopConfig
from poptune.errors import ConfigError
from poptune.kv import registry
from poptune.problem.space import all_configs
from poptune.tune.params import config_of_trial, distributions_of, params_of, suggest_config

ALL = ("own", "calibrated", "anchor")


def test_the_registry_lists_each_source_once_the_default_first():
    assert registry.NAMES == ALL and registry.DEFAULT == "own"
    assert [registry.source(n).name for n in ALL] == list(ALL)
    assert registry.source("own").label == "" and registry.source("calibrated").label == "calibrated K/V"
    with pytest.raises(ConfigError, match="`kv` must be one of own, calibrated, anchor, got 'bogus'"):
        registry.source("bogus")
    with pytest.raises(ConfigError, match="`kv` must be one of"):
        PopConfig(3, kv="bogus")


def test_an_anchor_configuration_is_stored_and_read_back_with_its_source():
    config = PopConfig(6, "window-64", kv="anchor")
    assert config.to_dict() == {"skip": 6, "boundary": "window-64", "offset": 0, "kv": "anchor"}
    assert PopConfig.from_dict(config.to_dict()) == config and str(config).endswith("kv=anchor")
    assert "kv" not in PopConfig(6).to_dict()  # the default source: stored as before
    assert PopConfig(2, layers=(1, 3), kv="anchor").kv == "anchor"  # any skipped set (no maps needed)
    with pytest.raises(ConfigError, match="final block"):
        PopConfig(2, layers=(1, 3), kv="calibrated")


def test_sources_differ_from_the_default_from_their_own_skip():
    assert registry.distinct_at(1, ALL) == ("own", "anchor")  # one skipped layer has no map: calibrated = own
    assert registry.distinct_at(2, ALL) == ALL
    assert registry.distinct_at(1, ("calibrated",)) == ("own",)


def test_the_search_space_takes_its_sources_from_the_registry():
    """Anchor is searched from one skipped layer, calibrated from two; every point is named once, and a trial's
    parameters (a parameter of its own where fewer sources differ) read back to the configuration."""
    configs = all_configs(6, ALL)
    assert len(configs) == len(set(configs))
    at = {skip: {c.kv for c in configs if c.skip == skip} for skip in range(6)}
    assert at[1] == {"own", "anchor"} and at[2] == set(ALL) and at[0] == {"own"}
    for config in configs:
        params, distributions = params_of(config, ALL), distributions_of(config, 6, ALL)
        assert set(params) == set(distributions)
        trial = optuna.trial.create_trial(params=params, distributions=distributions, value=0.0)
        assert config_of_trial(trial, 6) == config
    assert params_of(PopConfig(1, kv="anchor"), ALL) == {"skip": 1, "offset": 0, "boundary": "last",
                                                          "kv_own_anchor": "anchor"}
    assert set(params_of(PopConfig(3, kv="calibrated"), ("own", "calibrated"))) == {"skip", "offset", "boundary",
                                                                                   "kv"}  # as studies before


def test_an_optuna_study_searches_the_three_sources_without_a_dynamic_space():
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0, n_startup_trials=10))
    seen = []
    study.optimize(lambda t: seen.append(suggest_config(t, 6, ALL)) or float(seen[-1].skip), n_trials=40)
    assert {c.kv for c in seen if c.skip == 1} <= {"own", "anchor"}
    assert {c.kv for c in seen} == set(ALL)


def test_labels_and_tags_come_from_the_source(shared):
    from poptune.cli.study import trial_line
    from poptune.evaluate.lm import PopLM
    from poptune.store.front import FrontRow

    row = FrontRow(trial=0, config=PopConfig(6, kv="anchor"), method="pop", speedup=1.2,
                   drop=0.1, feasible=True, values={"ttft": 1.0, "accuracy": 0.5})
    assert row.label == "6/last/0/anchor" and row.config == PopConfig(6, kv="anchor")
    assert FrontRow(**{**row.__dict__, "config": PopConfig(6, kv="calibrated")}).label == "6/last/0/calibrated"
    model, tok = shared("tiny-llama")
    assert PopLM(pretrained=model, tokenizer=tok, skip=3, kv="anchor", batch_size=1).config_tag == \
        "pop-skip3-last-off0-kvanchor"
    del trial_line  # imported: its label is the source's (checked by the homes test)


def test_the_command_line_takes_anchor(capsys):
    from poptune.cli import main
    from poptune.cli._args import config_list

    assert config_list("6/window-64/0/anchor,7/last/0", "--pop") == (PopConfig(6, "window-64", kv="anchor"),
                                                                    PopConfig(7))
    with pytest.raises(ConfigError, match="its K/V source must be one of own, calibrated, anchor"):
        config_list("6/last/0/bogus", "--pop")
    assert main(["generate", "--model", "tiny-llama", "--skip", "3", "--boundary", "window-4", "--kv", "anchor",
                 "--prompt", "Hello there, how are you today?", "--max-new-tokens", "2"]) == 0
    assert "kv=anchor" in capsys.readouterr().out


def test_anchor_is_prepared_with_nothing_and_exports_nothing_beside(shared, tmp_path):
    from poptune.kvfit.prepare import kv_details, prepare_kv
    from poptune.reports.export import load_carried, load_config, write_export

    model, tok = shared("tiny-llama")
    config = PopConfig(3, kv="anchor")
    assert prepare_kv(model, tok, config) is None and kv_details(config, None) == {}
    data = {"format": "poptune-config/1", "model": {"name": "tiny-llama"}, "hardware": {"hardware_id": "cpu-x"},
            "pop_config": config.to_dict()}
    written = write_export(data, tmp_path / "c.json")
    assert [p.name for p in written] == ["c.json"]
    assert load_config(tmp_path / "c.json") == config
    load_carried(tmp_path / "c.json", model)  # nothing to attach: no error, no file
