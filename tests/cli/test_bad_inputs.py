"""Bad input to every command: one line on stderr, exit code 2, before any work, and no file touched."""

from __future__ import annotations

import fcntl
import os
import time

import optuna
import pytest

from poptune import store
from poptune.env import TuningProblem
from poptune.errors import ConfigError
from tests.refusals import refused as _refused

STUDY = ["study", "--model", "tiny-llama", "--tasks", "passkey", "--limit", "2", "--lengths", "300", "--repeats", "1",
         "--trials", "1"]


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("my notes, not a journal\n")
    return tmp_path


@pytest.mark.parametrize("value", ["-1", "4294967296", "x"])
def test_a_seed_out_of_range_is_refused(capsys, scratch, value):
    line = _refused(capsys, scratch, *STUDY, "--storage", f"sqlite:///{scratch}/s.db", "--seed", value)
    assert "--seed" in line


def test_an_argument_that_is_not_utf8(capsys, scratch):
    line = _refused(capsys, scratch, "generate", "--model", "tiny-llama", "--skip", "1", "--prompt",
                    os.fsdecode(b"caf\xe9"))
    assert "not valid UTF-8" in line


def test_config_with_skip_is_a_conflict(capsys, scratch):
    line = _refused(capsys, scratch, "generate", "--model", "tiny-llama", "--skip", "3", "--config",
                    str(scratch / "c.json"), "--prompt", "hi")
    assert "not both" in line


@pytest.mark.parametrize("command", [["pareto"], ["export", "--max-drop", "1"]])
@pytest.mark.parametrize("url", ["sqlite:///{d}/missing.db", "journal:{d}/missing.log"])
def test_readers_on_a_missing_database(capsys, scratch, command, url):
    line = _refused(capsys, scratch, *command, "--storage", url.format(d=scratch))
    assert "no study database" in line and "--study" not in line


def test_a_journal_on_the_users_file(capsys, scratch):
    line = _refused(capsys, scratch, *STUDY, "--storage", f"journal:{scratch}/notes.txt")
    assert "not an Optuna journal file" in line


@pytest.mark.parametrize("item", ["99/last/0", "5/last/2", "2/last/9", "2/window-8/0"])
def test_an_enqueued_configuration_outside_the_space_poisons_nothing(capsys, scratch, item):
    url = f"sqlite:///{scratch}/s.db"
    _refused(capsys, scratch, *STUDY, "--storage", url, "--enqueue", item)  # a new database: not even created
    store.open_storage(url, heartbeat=None)
    line = _refused(capsys, scratch, *STUDY, "--storage", url, "--enqueue", item)  # an existing one: unchanged
    assert "outside the search space" in line


def test_settings_of_a_stored_study_are_refused_before_the_bar(capsys, scratch):
    url = f"sqlite:///{scratch}/s.db"
    study = optuna.create_study(storage=url, study_name="s", directions=["minimize", "maximize"])
    problem = TuningProblem(model="tiny-llama", max_drop=None, tasks=("passkey",), lengths=(300,))
    study.set_user_attr("problem", problem.to_dict())
    line = _refused(capsys, scratch, *STUDY, "--storage", url, "--study", "s")
    assert line.startswith("poptune study: error:") and "other settings" in line


def test_a_second_worker_on_sqlite_is_refused(capsys, scratch):
    url = f"sqlite:///{scratch}/s.db"
    store.open_storage(url, heartbeat=None)
    fd = os.open(scratch / "s.db", os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a live worker's lock
    try:
        line = _refused(capsys, scratch, *STUDY, "--storage", url)
    finally:
        os.close(fd)
    assert "another process" in line and "journal:PATH" in line and "postgresql://" in line


@pytest.mark.parametrize("argv", [
    ["bench", "--model", "tiny-llama", "--skip", "1", "--out", "{ro}/b.json"],
    ["eval", "--model", "tiny-llama", "--skip", "1", "--tasks", "passkey", "--out", "{ro}/e.json"],
    ["export", "--max-drop", "1", "--out", "{ro}/c.json"],
    ["importance", "--model", "tiny-llama", "--out", "{ro}"],
])
def test_a_read_only_output_is_refused_before_any_work(capsys, scratch, argv, read_only_dir):
    line = _refused(capsys, scratch, *[a.format(ro=read_only_dir) for a in argv])
    assert "cannot write in" in line


@pytest.fixture
def no_work(monkeypatch):
    """Loading a model fails the test: what is refused must be refused before any work."""

    def load_model(*args, **kwargs):
        raise AssertionError("a model was loaded for an argument that should have been refused first")

    monkeypatch.setattr("poptune.models.load_model", load_model)
    monkeypatch.setattr("poptune.models.registry.load_model", load_model)


@pytest.mark.parametrize("argv", [
    [*STUDY, "--lengths", "999999"],  # issue 33, case 2: hung for minutes building items
    [*STUDY, "--lengths", "4000"],  # fits 4096 positions, but not with the room an answer needs
    ["baseline", "--model", "tiny-llama", "--method", "shortgpt", "--tasks", "passkey", "--lengths", "999999"],
    ["bench", "--model", "tiny-llama", "--skip", "1", "--lengths", "16,999999"],
    ["bench", "--model", "tiny-llama", "--skip", "1", "--lengths", "4090", "--decode-tokens", "16"],
])
def test_lengths_past_the_models_context_are_refused_before_any_work(capsys, scratch, no_work, argv):
    import time

    began = time.perf_counter()
    line = _refused(capsys, scratch, *argv, *(["--storage", f"sqlite:///{scratch}/s.db"] if argv[0] == "study" else []))
    # refused before building anything: seconds, where the bug took minutes (a bound any loaded machine meets)
    assert "exceed this model's 4096 positions" in line and time.perf_counter() - began < 30


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e999", "NaN"])
@pytest.mark.parametrize("argv", [
    [*STUDY, "--timeout={v}"],  # issue 33, case 6: nan ran with no limit
    [*STUDY, "--precision={v}"],
    [*STUDY, "--init-ratio={v}"],
    ["bench", "--model", "tiny-llama", "--skip", "1", "--min-seconds={v}"],
    ["bench", "--model", "tiny-llama", "--skip", "1", "--max-seconds={v}"],
    ["importance", "--model", "tiny-llama", "--ratio={v}"],
])
def test_a_number_that_is_not_finite_is_refused(capsys, scratch, no_work, argv, value):
    option = argv[-1].split("=")[0]
    line = _refused(capsys, scratch, *[a.format(v=value) for a in argv])
    assert f"argument {option}: must be a finite number" in line


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "x"])
@pytest.mark.parametrize("command", [["export"], [*STUDY]])
def test_max_drop_is_one_rule_in_every_command(capsys, scratch, no_work, command, value):
    """Issue 33, case 7: `export --max-drop inf` wrote `Infinity` (not JSON), `nan` looked for a configuration
    within nan points, `none` was refused by export and accepted by study."""
    line = _refused(capsys, scratch, *command, f"--max-drop={value}")
    assert "argument --max-drop: expected accuracy points >= 0" in line and "`none`" in line


@pytest.mark.parametrize("command", [["export"], ["pareto"]])
def test_export_takes_none_as_study_does(capsys, scratch, command):
    args = [*command, "--storage", f"sqlite:///{scratch}/missing.db"] + (["--max-drop", "none"] if command == ["export"]
                                                                        else [])
    line = _refused(capsys, scratch, *args)
    assert "no study database" in line  # parsed: the storage is what is missing


def test_a_data_directory_that_is_a_file(capsys, scratch, no_work):
    line = _refused(capsys, scratch, "eval", "--model", "tiny-llama", "--skip", "1", "--data-dir",
                    str(scratch / "notes.txt"))
    assert "notes.txt is a file, not a directory" in line


@pytest.mark.parametrize("argv", [["leaderboard", "--seeds", "0"], [*STUDY, "--heartbeat", "0"],
                                  [*STUDY, "--batch", "0"], ["grid", "--model", "tiny-llama", "--batch", "0"]])
def test_counts_below_one(capsys, scratch, no_work, argv):
    line = _refused(capsys, scratch, *argv)
    assert "must be an integer in [1, 1,000,000], got 0" in line


def _foreign_study(url: str, name: str = "other") -> None:
    """A study another tool wrote into the same database: no poptune attributes."""
    study = optuna.create_study(storage=url, study_name=name)
    study.set_user_attr("owner", "someone else")
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)


@pytest.mark.parametrize("command", [["pareto"], ["export", "--max-drop", "1"]])
@pytest.mark.parametrize("study", [["--study", "other"], []])
def test_readers_refuse_a_study_poptune_did_not_write(capsys, scratch, command, study):
    url = f"sqlite:///{scratch}/s.db"
    _foreign_study(url)
    line = _refused(capsys, scratch, *command, "--storage", url, *study)
    assert "study 'other' in sqlite:///" in line and "was not written by poptune" in line
    assert "no 'problem' attribute" in line and "owner" in line


def test_export_of_a_study_with_no_completed_trial_says_so(capsys, scratch):
    url = f"sqlite:///{scratch}/s.db"
    study = optuna.create_study(storage=url, study_name="s", directions=["minimize", "maximize"])
    study.set_user_attr("problem", TuningProblem(model="tiny-llama", tasks=("passkey",), lengths=(300,)).to_dict())
    study.set_user_attr("model", "tiny-llama")
    line = _refused(capsys, scratch, "export", "--storage", url, "--max-drop", "1")
    assert "study 's' has no completed trial" in line and "points" not in line


@pytest.mark.parametrize("command", [["pareto"], ["export", "--max-drop", "1"]])
@pytest.mark.parametrize("scheme", ["sqlite:///", "journal:"])
def test_readers_on_a_directory_say_it_is_one(capsys, scratch, command, scheme):
    (scratch / "studies").mkdir()
    line = _refused(capsys, scratch, *command, "--storage", f"{scheme}{scratch}/studies")
    assert "studies is a directory" in line and "no study database" not in line


@pytest.mark.parametrize("url", ["mysql://u@localhost/x", "redis://localhost", "mongodb://localhost/x"])
@pytest.mark.parametrize("command", [["pareto"], ["export", "--max-drop", "1"], STUDY])
def test_an_unsupported_storage_scheme_is_refused_with_the_supported_urls(capsys, scratch, url, command):
    line = _refused(capsys, scratch, *command, "--storage", url)
    assert "unsupported storage URL" in line and "sqlite:///PATH, postgresql://" in line and "journal:PATH" in line


def test_a_postgres_host_that_does_not_resolve_fails_at_once(capsys, scratch):
    pytest.importorskip("psycopg")
    started = time.monotonic()
    line = _refused(capsys, scratch, "pareto", "--storage", "postgresql://u:secret@no-such-host.invalid/x")
    assert time.monotonic() - started < 30.0  # not retried as a server restarting would be (for minutes)
    assert "'no-such-host.invalid' does not resolve" in line and "secret" not in line


@pytest.mark.parametrize("name", [".", "..", "../up", "a/b", "x" * 250, "é" * 120])
@pytest.mark.parametrize("command", [["pareto"], ["export", "--max-drop", "1"], STUDY])
def test_a_study_name_that_cannot_name_a_file_is_refused_before_any_work(capsys, scratch, name, command):
    url = f"sqlite:///{scratch}/s.db"
    line = _refused(capsys, scratch, *command, "--storage", url, "--study", name)
    assert "argument --study: study name" in line and ("cannot name" in line or "too long" in line)
    assert not (scratch / "s.db").exists()


def test_a_long_study_name_that_fits_is_taken():
    from poptune.store import check_study_name
    from poptune.tune.study import StudySpec

    assert check_study_name("x" * 237) == "x" * 237
    with pytest.raises(ConfigError, match="too long"):
        StudySpec(problem=TuningProblem(model="tiny-llama"), study="x" * 238)
    with pytest.raises(ConfigError, match="cannot name its report files"):
        StudySpec(problem=TuningProblem(model="tiny-llama"), study="..")


@pytest.mark.parametrize("argv", [["generate", "--model", "tiny-llama", "--skip", "1", "--prompt=--"],
                                  ["leaderboard", "--out=--"]])
def test_a_double_dash_value(capsys, scratch, no_work, argv):
    """Found by the fuzz (tests/cli/test_fuzz.py): argparse stored `--option=--` as an empty list (a traceback)."""
    line = _refused(capsys, scratch, *argv)
    assert "expected one argument" in line
