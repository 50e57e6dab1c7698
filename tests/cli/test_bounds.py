"""Values accepted without a word before (issue 87, points 4 and 5): storages that keep nothing or whose options are
ignored, a time budget out of range, empty and repeated values, a study name with a line break: each one line,
exit 2, nothing written."""

from __future__ import annotations

import pytest

from tests.refusals import refused as _refused

STUDY = ["study", "--model", "tiny-llama", "--tasks", "passkey", "--limit", "2", "--lengths", "300", "--repeats", "1",
         "--trials", "1"]
BENCH = ["bench", "--model", "tiny-llama", "--skip", "1", "--repeats", "1", "--min-seconds", "0", "--decode-tokens",
         "0"]


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("mine\n")
    return tmp_path


@pytest.mark.parametrize("url, said", [("sqlite:///:memory:", "in-memory"), ("sqlite://", "in-memory"),
                                       ("sqlite:///s.db?mode=ro", "options (mode) are not honoured"),
                                       ("sqlite:///file:s.db?mode=memory&uri=true", "in-memory")])
def test_a_sqlite_storage_that_cannot_keep_the_study_or_ignores_its_options(capsys, scratch, url, said):
    line = _refused(capsys, scratch, *STUDY, "--storage", url)
    assert said in line and url in line


@pytest.mark.parametrize("value", ["0.001", "1e308", "20000"])
def test_a_time_budget_out_of_range(capsys, scratch, value):
    line = _refused(capsys, scratch, *STUDY, "--storage", f"sqlite:///{scratch}/s.db", "--time-budget", value)
    assert "--time-budget" in line and "[1, 10080]" in line


@pytest.mark.parametrize("argv, said", [
    ([*STUDY, "--storage", "sqlite:///s.db", "--lengths", "300,300"], "`--lengths` names 300 more than once"),
    ([*BENCH, "--lengths", "16,16"], "`--lengths` names 16 more than once"),
    (["pareto", "--storage", "sqlite:///s.db", "--out", ""], "`--out` must not be empty"),
    (["export", "--storage", "sqlite:///s.db", "--max-drop", "1", "--out", ""], "`--out` must not be empty"),
    (["leaderboard", "--storage", "sqlite:///s.db", "--out", " "], "`--out` must not be empty"),
    ([*STUDY, "--storage", ""], "`--storage` must not be empty"),
    ([*STUDY, "--storage", "sqlite:///s.db", "--study", "a\nb"], "line break"),
])
def test_empty_repeated_and_unprintable_values(capsys, scratch, argv, said):
    assert said in _refused(capsys, scratch, *argv)


@pytest.mark.parametrize("argv", [[*STUDY, "--storage", "sqlite:///s.db"], BENCH])
@pytest.mark.parametrize("value", ["1", "2"])
def test_fewer_than_three_pairs_leave_the_noise_checks_nothing_to_judge(capsys, scratch, argv, value):
    """Issue 87: ``--max-pairs 2`` let a 12.25x speedup against an ideal of 1.90x sit on the front unflagged."""
    line = _refused(capsys, scratch, *argv, "--max-pairs", value)
    assert "--max-pairs" in line and "must be >= 3" in line and f"got {value}" in line


def _stored_study(url: str, argv: list[str], trials: int = 1) -> None:
    """The study ``argv`` would run, stored with ``trials`` completed trials (written here, no model loaded)."""
    import optuna

    from poptune.cli import build_parser
    from poptune.cli._args import problem

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(storage=url, study_name="s", directions=["minimize", "maximize"])
    study.set_user_attr("problem", problem(build_parser().parse_args(argv)).dtype_named().to_dict())
    study.set_user_attr("model", "tiny-llama")
    study.set_user_attr("num_layers", 6)
    for skip in range(trials):
        attrs = {"config": {"skip": skip, "boundary": "last", "offset": 0}, "speedup": 1.0, "drop_points": 0.0,
                 "accuracy_mean": 1.0}
        study.add_trial(optuna.trial.create_trial(values=[5.0, 1.0], user_attrs=attrs))


@pytest.mark.parametrize("trials", ["1", "9"], ids=["complete", "to resume"])
def test_an_enqueued_skip_of_twenty_digits_is_refused_before_the_model_loads(capsys, scratch, no_model_load, trials):
    """Issue 87: on a complete study ``--enqueue 99999999999999999999/last/0`` was not even checked."""
    argv = [*STUDY[:-1], trials, "--storage", f"sqlite:///{scratch}/s.db", "--study", "s"]
    _stored_study(argv[-3], argv)
    line = _refused(capsys, scratch, *argv, "--enqueue", "99999999999999999999/last/0")
    assert "`--enqueue` item 99999999999999999999/last/0 is outside the search space" in line


def test_an_enqueued_configuration_on_a_complete_study_is_said_to_wait(caplog, scratch, no_model_load):
    from poptune.cli import main
    from tests.refusals import files_of

    argv = [*STUDY, "--storage", f"sqlite:///{scratch}/s.db", "--study", "s", "--no-confirm"]
    _stored_study(argv[-4], argv)
    before = files_of(scratch)
    assert main([*argv, "--enqueue", "3/last/0"]) == 0
    assert "already holds its 1 trials: the configurations of --enqueue are not measured" in caplog.text
    assert files_of(scratch)["s.db"] == before["s.db"]


def _answers_file(folder, kind: str) -> None:
    import os
    import sqlite3

    path = folder / "full-answers.sqlite"
    if kind == "folder":
        path.mkdir()
    elif kind == "FIFO":
        os.mkfifo(path)
    elif kind == "text":
        path.write_text("my notes\n")
    elif kind == "another database":
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE mine (x)")
    elif kind == "link to /dev/null":
        path.symlink_to("/dev/null")
    else:
        path.symlink_to(folder / "missing" / "x")


@pytest.mark.parametrize("kind, said", [
    ("folder", "is a directory"), ("FIFO", "is a FIFO"), ("text", "is not an SQLite database"),
    ("another database", "is an SQLite database but not poptune's full-model answers (tables: mine)"),
    ("link to /dev/null", "is a character device"), ("link to nothing", "symbolic link to a missing file")])
def test_a_broken_answers_file_is_refused_before_the_model_loads_and_the_storage_is_made(
        capsys, scratch, no_model_load, kind, said):
    """Issue 87: refused only after the model loaded (8-16 s), leaving a new study database with two WAITING
    trials (and another database got poptune's table added)."""
    _answers_file(scratch, kind)
    line = _refused(capsys, scratch, *STUDY, "--storage", f"sqlite:///{scratch}/s.db")
    assert "the full model's answers beside the storage" in line and said in line, line
    assert not (scratch / "s.db").exists()
