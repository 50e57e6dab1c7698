"""A stored trial another tool wrote or changed (issue 87, points 4 and 5): a foreign study with poptune's
``problem`` attribute but trials without ``config``, ``speedup = "fast"``, ``latency = NaN``, a ``skip`` past the
model's layers. ``pareto``, ``export`` and ``leaderboard`` refuse it in one line naming the trial and the value,
exit 2, nothing written (they were ``KeyError``, ``ValueError`` and ``AttributeError`` tracebacks, and a
``skip=99`` was exported as is)."""

from __future__ import annotations

import math

import optuna
import pytest

from poptune.env import TuningProblem
from poptune.errors import ConfigError
from poptune.store import StoredTrial
from tests.refusals import refused as _refused

optuna.logging.set_verbosity(optuna.logging.WARNING)

_ATTRS = {"config": {"skip": 2, "boundary": "last", "offset": 0}, "target_length": 300, "speedup": 1.5,
          "speedup_ci": [1.4, 1.6], "pairs": 6, "ideal": 1.6, "prefill_ms": 4.0, "full_ms": 6.0,
          "latency": {"300": {"full_ms": 6.0, "pop_ms": 4.0, "speedup": 1.5, "pairs": 6, "ideal": 1.6}},
          "drop_points": 0.0, "accuracy": {"passkey": 1.0}, "full_accuracy": {"passkey": 1.0}, "accuracy_mean": 1.0,
          "items": {"passkey": 2}, "feasible": True}

COMMANDS = [["pareto", "--out", "{d}/p.md"], ["export", "--max-drop", "100", "--out", "{d}/c.json"],
            ["leaderboard", "--out", "{d}/board"]]


def _stored(url: str, **changed) -> None:
    """A poptune study of tiny-llama (6 layers) with one completed trial, its attributes ``changed`` (a value of
    ``...`` removes the key)."""
    study = optuna.create_study(storage=url, study_name="s", directions=["minimize", "maximize"])
    study.set_user_attr("problem", TuningProblem(model="tiny-llama", tasks=("passkey",), lengths=(300,)).to_dict())
    study.set_user_attr("model", "tiny-llama")
    study.set_user_attr("num_layers", 6)
    study.set_user_attr("hardware", {"hardware_id": "cpu-test", "kind": "cpu"})
    attrs = {k: v for k, v in {**_ATTRS, **changed}.items() if v is not ...}
    study.add_trial(optuna.trial.create_trial(values=[4.0, 1.0], user_attrs=attrs))


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "board").mkdir()
    return tmp_path


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("changed, said", [
    ({"config": ...}, "it has no `config`"),
    ({"speedup": "fast"}, "its `speedup` is 'fast', not a finite number"),
    ({"speedup": math.nan}, "its `speedup` is nan, not a finite number"),
    ({"latency": math.nan}, "its `latency` is nan, not a mapping"),
    ({"drop_points": None}, "its `drop_points` is None, not a finite number"),
    ({"pairs": "6"}, "its `pairs` is '6', not a whole number"),
    ({"speedup_ci": [1.4]}, "its `speedup_ci` is [1.4], not two finite numbers"),
    ({"config": {"skip": "two"}}, "is not a configuration"),
    ({"config": {"skip": 99, "boundary": "last", "offset": 0}}, "does not fit its 6-layer model"),
])
def test_a_tampered_or_foreign_trial_is_refused_by_every_reader(capsys, scratch, command, changed, said):
    url = f"sqlite:///{scratch}/s.db"
    _stored(url, **changed)
    line = _refused(capsys, scratch, *[a.format(d=scratch) for a in command], "--storage", url)
    assert "study 's'" in line and "stored trial 0" in line and said in line, line
    assert not (scratch / "p.md").exists() and not (scratch / "c.json").exists()


def test_the_untampered_study_is_read(capsys, scratch):
    """The same study as stored by poptune: pareto and export read it (the refusals above are of the changes)."""
    from poptune.cli import main

    url = f"sqlite:///{scratch}/s.db"
    _stored(url)
    assert main(["pareto", "--storage", url, "--out", str(scratch / "p.md")]) == 0
    assert main(["export", "--storage", url, "--max-drop", "100", "--out", str(scratch / "c.json")]) == 0
    assert '"skip": 2' in (scratch / "c.json").read_text()


def test_the_one_reader_names_the_trial():
    study = optuna.create_study(directions=["minimize", "maximize"])
    study.add_trial(optuna.trial.create_trial(values=[4.0, 1.0], user_attrs={**_ATTRS, "seconds": "long"}))
    with pytest.raises(ConfigError, match="stored trial 0 .* its `seconds` is 'long', not a finite number"):
        StoredTrial.of(study.trials[0])
