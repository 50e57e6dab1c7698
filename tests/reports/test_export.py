"""Exported configurations: the measured configuration round-trips; other models and machines are refused."""

from __future__ import annotations

import json

import optuna
import pytest

from poptune import ConfigError, apply_pop, get_pop_config, load_model, store
from poptune.cli import main
from poptune.env import TuningProblem
from poptune.reports.export import export_config, load_config
from poptune.tune.study import StudySpec, run_study
from tests.hostile import assert_intact, hostile_paths

optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.fixture(scope="module")
def stored(tmp_path_factory, eval_data):
    problem = TuningProblem(model="tiny-llama", max_drop=None, tasks=("piqa",), limit=4, data_dir=str(eval_data),
                            lengths=(16,), repeats=1, decode_tokens=0, precision=None)
    url = f"sqlite:///{tmp_path_factory.mktemp('export')}/s.db"
    return url, run_study(StudySpec(problem=problem, trials=4, storage=url, sampler="random", seed=5))


def test_export_round_trips_to_the_measured_configuration(stored, tmp_path, capsys):
    url, study = stored
    path = tmp_path / "config.json"
    assert main(["export", "--storage", url, "--max-drop", "100", "--out", str(path), "--model", "tiny-llama"]) == 0
    data = json.loads(path.read_text())
    trial = study.trials[data["provenance"]["trial"]]
    assert data["pop_config"] == trial.user_attrs["config"]
    obj = data["objectives"]
    if obj["confirmed"]:  # the confirmation pass's figures, as the front reads them
        figures = study.user_attrs["confirmation"]["trials"][str(trial.number)]
        assert obj["speedup"] == figures["speedup"] and obj["pairs"] == figures["pairs"]
        assert obj["prefill_ms"] == pytest.approx(study.user_attrs["reference_prefill_ms"] / figures["speedup"])
    else:
        assert obj["prefill_ms"] == trial.values[0]
    assert obj["speedup_lo"] <= obj["speedup"] <= obj["speedup_hi"]
    assert data["model"] == {"name": "tiny-llama", "weights_fingerprint": study.user_attrs["weights_fingerprint"]}
    config = load_config(path, model="tiny-llama", device="cpu")
    model, _ = load_model("tiny-llama")
    apply_pop(model, config)
    assert get_pop_config(model).to_dict() == trial.user_attrs["config"]
    fastest = min((r for r in store.front(study)), key=lambda r: r.prefill_ms)
    assert data["provenance"]["trial"] == fastest.trial


def test_budget_selects_within_drop(stored):
    url, study = stored
    data = export_config(url, None, max_drop=100.0)
    assert data["objectives"]["drop_ci"][1] <= 100.0 and data["objectives"]["verdict"].startswith("not certified")
    try:  # 4 items per task cannot show a POP configuration within 0 points: only the full model could be
        data = export_config(url, None, max_drop=0.0)
    except ConfigError as e:
        assert "within 0.0 points" in str(e)
    else:
        assert data["objectives"]["drop_ci"][1] <= 0.0 and data["pop_config"]["skip"] == 0
    with pytest.raises(ConfigError, match="must be >= 0"):
        export_config(url, None, max_drop=-1)


def test_other_model_or_machine_is_refused_unless_forced(stored, tmp_path, capsys):
    url, _ = stored
    path = tmp_path / "config.json"
    data = export_config(url, None, max_drop=100)
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="tuned for 'tiny-llama'"):
        load_config(path, model="tiny-qwen3")
    data["hardware"]["hardware_id"] = "nvidia-h200"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="measured on nvidia-h200"):
        load_config(path, device="cpu")
    assert load_config(path, model="tiny-qwen3", device="cpu", force=True).to_dict() == data["pop_config"]
    code = main(["generate", "--model", "tiny-llama", "--config", str(path), "--prompt", "hi"])
    assert code == 2 and "--force" in capsys.readouterr().err
    assert main(["generate", "--model", "tiny-llama", "--config", str(path), "--force", "--prompt", "hi",
                 "--max-new-tokens", "2"]) == 0


def test_bad_config_files(tmp_path):
    with pytest.raises(ConfigError, match="no configuration file"):
        load_config(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ConfigError, match="configuration file .*bad.json is not JSON"):
        load_config(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text("{}")
    with pytest.raises(ConfigError, match="expected format"):
        load_config(tmp_path / "other.json")


def test_pareto_prints_the_stored_front(stored, capsys):
    url, study = stored
    assert main(["pareto", "--storage", url, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [row["trial"] for row in data["front"]] == [r.trial for r in store.front(study)]
    assert main(["pareto", "--storage", url, "--study", "nope"]) == 2


def test_a_calibrated_configuration_exports_its_maps_and_generate_applies_them(tmp_path, eval_data, capsys,
                                                                                monkeypatch):
    """The study fits the block's maps once and records them with the trial; the export copies the file beside
    the JSON (referenced with its sha256); ``generate --config`` applies them; a changed file is refused."""
    from poptune.reports import export
    from poptune.store.front import FrontRow

    problem = TuningProblem(model="tiny-llama", max_drop=None, tasks=("piqa",), limit=4, data_dir=str(eval_data),
                            lengths=(16,), repeats=1, decode_tokens=0, precision=None, kv=("calibrated",))
    url = f"sqlite:///{tmp_path}/s.db"
    study = run_study(StudySpec(problem=problem, trials=2, storage=url, sampler="random", seed=5))
    (trial,) = [t for t in store.completed(study) if t.user_attrs["config"].get("kv") == "calibrated"]
    maps = trial.user_attrs["details"]["kv_maps"]
    assert maps["block"] == [4, 6] and len(maps["sha256"]) == 64
    # Fitted on the study's own prompts that it never scores (issue 38), and the summary says so.
    assert maps["calibration"]["source"].startswith("study workload calibration split: piqa: ")
    from poptune.reports.study_report import summary_markdown

    calibration = maps["calibration"]
    assert (f"- calibrated K/V maps fitted on: {calibration['source']} (the fit took {calibration['prompts']} of "
            f"them, {calibration['tokens']:,} tokens)") in summary_markdown(study)
    check = maps["validation"]  # and what the fit's held-out check decided for the block
    assert check["keep"] == (check["p"] < check["alpha"])
    assert ("[4, 6): maps kept" if check["keep"] else "[4, 6): layers' own kept") in summary_markdown(study)
    monkeypatch.setattr(export, "best_within_budget", lambda study, max_drop: FrontRow.from_trial(trial))
    path = tmp_path / "config.json"
    assert main(["export", "--storage", url, "--max-drop", "100", "--out", str(path)]) == 0
    assert "calibrated K/V" in capsys.readouterr().out
    data = json.loads(path.read_text())
    assert data["pop_config"]["kv"] == "calibrated" and data["kv_maps"]["file"] == "config.kv.safetensors"
    assert (path.parent / "config.kv.safetensors").is_file()
    assert main(["generate", "--model", "tiny-llama", "--config", str(path), "--prompt", "Hello there, how are you",
                 "--max-new-tokens", "2"]) == 0
    assert "kv=calibrated" in capsys.readouterr().out
    (path.parent / "config.kv.safetensors").write_bytes(b"changed")
    assert main(["generate", "--model", "tiny-llama", "--config", str(path), "--prompt", "Hello"]) == 2
    err = capsys.readouterr().err.strip()
    assert "does not match its recorded sha256" in err and len(err.splitlines()) == 1


def test_no_budget_exports_the_fastest_configuration(stored, capsys):
    """Issue 33, case 7: `--max-drop none` (as `study` takes it) exports the fastest, its budget JSON's null."""
    url, study = stored
    assert main(["export", "--storage", url, "--max-drop", "none"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["objectives"]["max_drop"] is None
    fastest = min((r for r in store.front(study) if r.method == "pop"), key=lambda r: (r.prefill_ms, r.drop, r.trial))
    assert data["provenance"]["trial"] == fastest.trial
    with pytest.raises(ConfigError, match="finite"):
        export_config(url, None, max_drop=float("inf"))


# Issue 49: outputs are regular files only, the maps file beside the JSON included, checked before any work; an
# exported file missing what it is read for is refused in one line.


@pytest.mark.parametrize("kind", ["fifo", "null", "full", "dangling", "folder"])
def test_export_out_that_is_not_a_regular_file_is_refused_untouched(stored, guard_renames, capsys, kind):
    url, _ = stored
    paths = hostile_paths(guard_renames / "hostile")
    code = main(["export", "--storage", url, "--max-drop", "100", "--out", str(paths[kind])])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert_intact(paths)
    assert sorted(p.name for p in paths["fifo"].parent.iterdir()) == sorted(p.name for p in paths.values())


@pytest.mark.parametrize("kind", ["fifo", "null", "folder"])
def test_export_refuses_a_maps_path_that_is_not_a_regular_file_before_writing(stored, guard_renames, capsys, kind):
    url, _ = stored
    paths = hostile_paths(guard_renames / "hostile")
    out = guard_renames / "c.json"
    (guard_renames / "c.kv.safetensors").symlink_to(paths[kind])
    code = main(["export", "--storage", url, "--max-drop", "100", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "c.kv.safetensors" in err and len(err.splitlines()) == 1, err
    assert not out.exists()
    assert_intact(paths)


def _maps_export(tmp_path):
    from poptune.kv.maps import file_sha256

    source = tmp_path / "fitted.safetensors"
    source.write_bytes(b"maps")
    return {"format": "poptune-config/1", "pop_config": {"skip": 1, "kv": "calibrated"},
            "kv_maps": {"file": str(source), "sha256": file_sha256(source)}}


def test_write_export_refuses_a_folder_where_its_maps_go_and_writes_nothing(tmp_path):
    from poptune.reports.export import write_export

    (tmp_path / "c.kv.safetensors").mkdir()
    with pytest.raises(ConfigError, match="c.kv.safetensors is a directory"):
        write_export(_maps_export(tmp_path), tmp_path / "c.json")
    assert not (tmp_path / "c.json").exists() and not any((tmp_path / "c.kv.safetensors").iterdir())


def test_write_export_copies_the_maps_atomically(tmp_path):
    from poptune.reports.export import write_export

    written = write_export(_maps_export(tmp_path), tmp_path / "c.json")
    assert [p.name for p in written] == ["c.json", "c.kv.safetensors"]
    assert (tmp_path / "c.kv.safetensors").read_bytes() == b"maps"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.json", "c.kv.safetensors", "fitted.safetensors"]


def _config(tmp_path, **changes):
    data = {"format": "poptune-config/1", "model": {"name": "tiny-llama"}, "hardware": {"hardware_id": "cpu-x"},
            "pop_config": {"skip": 1}}
    data.update(changes)
    path = tmp_path / "c.json"
    path.write_text(json.dumps({k: v for k, v in data.items() if v is not ...}))
    return path


@pytest.mark.parametrize("changes, message", [
    ({"pop_config": ...}, "no `pop_config` object"),
    ({"pop_config": None}, "no `pop_config` object"),
    ({"pop_config": [1]}, "no `pop_config` object"),
    ({"model": None}, "no `model.name`"),
    ({"hardware": {}}, "no `hardware.hardware_id`"),
    ({"pop_config": {"skip": 1, "kv": "calibrated"}}, "names no `kv_maps`"),
    ({"pop_config": {"skip": 1, "kv": "calibrated"}, "kv_maps": {"file": "c.kv.safetensors"}},
     "must name its `file` and `sha256`"),
    ({"pop_config": {"skip": 1, "kv": "calibrated"}, "kv_maps": {"file": "c.kv.safetensors", "sha256": ""}},
     "must name its `file` and `sha256`"),
])
def test_an_exported_file_missing_what_it_is_read_for_is_one_error(tmp_path, changes, message):
    from poptune.reports.export import load_carried

    path = _config(tmp_path, **changes)
    with pytest.raises(ConfigError, match=message):
        load_config(path)
    with pytest.raises(ConfigError, match=message):
        load_carried(path, model=None)


def test_generate_with_a_config_without_pop_config_is_one_line(tmp_path, capsys):
    path = _config(tmp_path, pop_config=None)
    assert main(["generate", "--model", "tiny-llama", "--config", str(path), "--prompt", "hi"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no `pop_config` object" in err, err
