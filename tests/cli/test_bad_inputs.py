"""Bad input to every command: one line on stderr, exit code 2, before any work, and no file touched."""

from __future__ import annotations

import fcntl
import hashlib
import os

import optuna
import pytest

from poptune import store
from poptune.cli import main
from poptune.env import TuningProblem

STUDY = ["study", "--model", "tiny-llama", "--tasks", "passkey", "--limit", "2", "--lengths", "300", "--repeats", "1",
         "--trials", "1"]


def _files(folder) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _refused(capsys, folder, *argv) -> str:
    """Run ``poptune argv`` in ``folder``; assert exit 2, one stderr line, no file touched; return the line."""
    before = _files(folder)
    try:
        code = main(list(argv))
    except SystemExit as e:  # argparse's own errors
        code = e.code
    out, err = capsys.readouterr()
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert _files(folder) == before
    return err.strip()


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
    study.set_user_attr("problem", TuningProblem(model="tiny-llama", max_drop=None, tasks=("passkey",), lengths=(300,)).to_dict())
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
