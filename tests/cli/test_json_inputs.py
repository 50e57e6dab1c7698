"""Every JSON a command reads from a user goes through the bounded reader (issue 87, point 4): an integer of
thousands of digits, deep nesting or a key given twice is one line and exit 2, before the model loads."""

from __future__ import annotations

import hashlib
import json

import pytest

from poptune.cli import main

STUDY = ["study", "--model", "tiny-llama", "--limit", "2", "--repeats", "1", "--trials", "1"]
HUGE = "1" * 5000


def _files(folder) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _refused(capsys, folder, *argv: str) -> str:
    before = _files(folder)
    try:
        code = main(list(argv))
    except SystemExit as e:
        code = e.code
    _, err = capsys.readouterr()
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert _files(folder) == before
    return err.strip()


@pytest.fixture
def no_model_load(monkeypatch):
    import poptune.models.registry as registry

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the input was checked")

    monkeypatch.setattr(registry, "_random_model", refuse)
    monkeypatch.setattr(registry, "_from_pretrained", refuse)


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
