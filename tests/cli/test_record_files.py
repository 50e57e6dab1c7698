"""Every record and configuration file the commands read is checked before use (issue 57): a file poptune wrote
itself, a tampered one with the right name, or 100,000 nested brackets is read or refused in one line (exit 2),
never a traceback; an importance file for another number of layers, or an export tuned on other weights, is
refused, not applied."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from poptune.baselines.importance import ImportanceResult, ImportanceSpec
from poptune.cli import main
from poptune.reports.export import FORMAT
from tests.refusals import refused as _refused

ROOT = Path(__file__).resolve().parents[2]
LONG_PROMPTS = ROOT / "leaderboards" / "raw" / "methods-long-prompts-gemma-3-270m-cpu-intel-xeon-processor-2t.json"
DEEP = "[" * 100_000 + "]" * 100_000


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "r").mkdir()
    return tmp_path


def test_the_committed_long_prompts_record_alone_makes_a_board(scratch, capsys):
    # its `profiles` is [] (scored without timing): rows_of took max() of nothing (issue 57)
    shutil.copyfile(LONG_PROMPTS, scratch / "r" / LONG_PROMPTS.name)
    assert main(["leaderboard", "--records", "r", "--out", "out"]) == 0
    md = next((scratch / "out").glob("methods-*.md")).read_text()
    assert "long-prompts" in md and "| pop |" in md


def _record() -> dict:
    return json.loads(LONG_PROMPTS.read_text())


TAMPERED = {
    "a list": lambda r: [r],
    "no methods": lambda r: {**r, "methods": []},
    "methods a string": lambda r: {**r, "methods": "x"},
    "a method a number": lambda r: {**r, "methods": [1, *r["methods"]]},
    "outcomes a list": lambda r: {**r, "methods": [{**r["methods"][0], "outcomes": [1]}, *r["methods"][1:]]},
    "a score a string": lambda r: {**r, "methods": [{**r["methods"][0], "outcomes": {
        t: ["x"] for t in r["tasks"]}}, *r["methods"][1:]]},
    "profiles of strings": lambda r: {**r, "profiles": ["2048+32"]},
    "profiles a number": lambda r: {**r, "profiles": 3},
    "hardware a string": lambda r: {**r, "hardware": "cpu"},
    "tasks a string": lambda r: {**r, "tasks": "longctx_squad"},
    "no full model": lambda r: {**r, "methods": r["methods"][1:]},
    "timing not pairs": lambda r: {**r, "methods": [{**r["methods"][1], "timing": {"1+1": {"ttft_ms": 3}}},
                                                   r["methods"][0]]},
    "another version": lambda r: {**r, "version": 7},
    "a ratio a string": lambda r: {**r, "methods": [{**r["methods"][0], "ratio": "0"}, *r["methods"][1:]]},
}

#: Issue 87: accepted without a word before (tampered record, the field the refusal names).
TAMPERED_87 = {
    "num_layers 0": (lambda r: {**r, "num_layers": 0}, "`num_layers` must be an integer >= 1"),
    "no num_layers": (lambda r: {k: v for k, v in r.items() if k != "num_layers"}, "`num_layers`"),
    "items and outcomes of other lengths": (lambda r: {**r, "methods": [
        {**r["methods"][0], "items": {t: v[:-1] for t, v in r["methods"][0]["items"].items()}}, *r["methods"][1:]]},
        "one item for each score of `outcomes`"),
    "items of another task": (lambda r: {**r, "methods": [{**r["methods"][0], "items": {"x": []}},
                                                         *r["methods"][1:]]}, "one item for each score"),
}


@pytest.mark.parametrize("how", sorted(TAMPERED_87))
def test_a_record_whose_counts_do_not_agree_is_refused(scratch, capsys, how):
    tamper, said = TAMPERED_87[how]
    (scratch / "r" / "methods-x.json").write_text(json.dumps(tamper(_record())))
    line = _refused(capsys, scratch, "leaderboard", "--records", "r", "--out", "out")
    assert "methods-x.json" in line and said in line, line


@pytest.mark.parametrize("how", sorted(TAMPERED))
def test_a_tampered_record_is_refused_in_one_line(scratch, capsys, how):
    (scratch / "r" / "methods-x.json").write_text(json.dumps(TAMPERED[how](_record())))
    line = _refused(capsys, scratch, "leaderboard", "--records", "r", "--out", "out")
    assert "methods-x.json" in line


def _importance(layers: int, value: float = 1.0) -> str:
    result = ImportanceResult(model="tiny-llama", prefill=(value,) * layers, decode=(1.0,) * layers,
                              spec=ImportanceSpec(samples=4, prompt_tokens=16, new_tokens=4), source="generated",
                              loss=3.0, seconds=1.0, dtype="float32", device="cpu")
    return result.to_json()


STUDY = ["study", "--model", "tiny-llama", "--tasks", "passkey", "--limit", "2", "--lengths", "300", "--repeats", "1",
         "--trials", "1", "--storage", "sqlite:///s.db", "--init-from-importance", "imp.json"]


@pytest.mark.parametrize("text", [_importance(12), _importance(2), _importance(6, float("inf")),
                                  _importance(6).replace('"num_layers": 6', '"num_layers": 12'), DEEP,
                                  json.dumps({"format": "poptune-importance/1", "model": "tiny-llama",
                                              "prefill": [1, 2], "decode": [1, 2], "calibration": [1]})],
                         ids=["12 layers", "2 layers", "inf", "num_layers", "deep", "calibration a list"])
def test_an_importance_file_that_does_not_fit_the_model_is_refused(scratch, capsys, text):
    (scratch / "imp.json").write_text(text)
    line = _refused(capsys, scratch, *STUDY)
    assert "imp.json" in line


def _export(**model) -> dict:
    from poptune.measure.hardware import fingerprint

    return {"format": FORMAT, "pop_config": {"skip": 1, "boundary": "last", "offset": 0},
            "model": {"name": "tiny-llama", **model}, "hardware": {"hardware_id": fingerprint("cpu").hardware_id}}


@pytest.mark.parametrize("data", [
    _export(weights_fingerprint="random-seed0-config-0000000000000000"),
    DEEP,
    {**_export(), "pop_config": {"skip": "x"}},
    {**_export(), "pop_config": {"skip": 1, "layers": 3}},
    {**_export(), "pop_config": {"skip": 1, "kv": ["own"]}},
    {**_export(), "pop_config": [1]},
    {**_export(), "model": {"name": "tiny-llama", "weights_fingerprint": 3}},
], ids=["other weights", "deep", "skip a string", "layers a number", "kv a list", "config a list", "fingerprint"])
def test_a_config_file_that_does_not_fit_is_refused(scratch, capsys, data):
    (scratch / "c.json").write_text(data if isinstance(data, str) else json.dumps(data))
    line = _refused(capsys, scratch, "generate", "--model", "tiny-llama", "--config", "c.json", "--prompt", "hi")
    assert "c.json" in line or "PopConfig" in line or "skip" in line


def test_a_config_of_these_weights_is_applied(scratch, capsys):
    from poptune.models import weights_fingerprint

    (scratch / "c.json").write_text(json.dumps(_export(weights_fingerprint=weights_fingerprint("tiny-llama"))))
    assert main(["generate", "--model", "tiny-llama", "--config", "c.json", "--prompt", "hi",
                 "--max-new-tokens", "2"]) == 0


@pytest.mark.parametrize("fingerprint", [{}, {"weights_fingerprint": None}], ids=["removed", "null"])
def test_a_config_without_its_weights_fingerprint_is_refused_unless_forced(scratch, capsys, fingerprint):
    """Issue 87: a file whose fingerprint was removed or nulled was applied to any weights without a word; now
    only ``--force`` says it is meant for any weights."""
    (scratch / "c.json").write_text(json.dumps(_export(**fingerprint)))
    argv = ["generate", "--model", "tiny-llama", "--config", "c.json", "--prompt", "hi", "--max-new-tokens", "2"]
    line = _refused(capsys, scratch, *argv)
    assert "c.json names no `model.weights_fingerprint`" in line and "--force" in line
    assert main([*argv, "--force"]) == 0
