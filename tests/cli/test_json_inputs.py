"""Every JSON a command reads from a user goes through the bounded reader (issue 87, point 4): an integer of
thousands of digits, deep nesting or a key given twice is one line and exit 2, before the model loads."""

from __future__ import annotations

import json

import pytest

from tests.refusals import refused as _refused

STUDY = ["study", "--model", "tiny-llama", "--limit", "2", "--repeats", "1", "--trials", "1"]
HUGE = "1" * 5000


@pytest.mark.parametrize("text, message", [
    ('{"format": "poptune-config/1", "seed": ' + HUGE + "}", "an integer of 5000 digits"),
    ('{"format": "poptune-config/1", "format": "poptune-config/1"}', "given twice"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
])
def test_generate_config(capsys, tmp_path, no_model_load, text, message):
    (tmp_path / "c.json").write_text(text)
    line = _refused(capsys, tmp_path, "generate", "--model", "tiny-llama", "--config", str(tmp_path / "c.json"),
                    "--prompt", "hi")
    assert message in line and "c.json" in line


def test_study_init_from_importance(capsys, tmp_path, no_model_load):
    (tmp_path / "i.json").write_text('{"format": "poptune-importance/1", "num_layers": ' + HUGE + "}")
    line = _refused(capsys, tmp_path, *STUDY, "--tasks", "passkey", "--lengths", "300", "--storage",
                    f"sqlite:///{tmp_path}/s.db", "--init-from-importance", str(tmp_path / "i.json"))
    assert "an integer of 5000 digits" in line and "i.json" in line


@pytest.mark.parametrize("line, message", [
    ('{"prompt": "hi", "max_tokens": ' + HUGE + "}", "an integer of 5000 digits"),
    ('{"prompt": "hi", "prompt": "ho"}', "given twice"),
    ('{"messages": ' + "[" * 50_000 + "]" * 50_000 + "}", "nested too deeply"),
])
def test_study_prompts(capsys, tmp_path, no_model_load, line, message):
    (tmp_path / "p.jsonl").write_text(json.dumps({"prompt": "Name a colour."}) + "\n" + line + "\n")
    err = _refused(capsys, tmp_path, *STUDY, "--storage", f"sqlite:///{tmp_path}/s.db", "--prompts",
                   str(tmp_path / "p.jsonl"))
    assert message in err and "line 2" in err
