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
