"""Hostile output paths and the small refusals of issue 49: one line, exit 2, nothing touched, nothing hung.

Output paths are FIFOs, links to ``/dev/null`` and ``/dev/full``, links to nothing and folders, all inside the
test's folder; :func:`tests.hostile.guard_renames` stops any rename outside it, so a regression fails a test
instead of replacing a device of the machine (these tests run as root).
"""

from __future__ import annotations

import pytest

from tests.hostile import assert_intact, hostile_paths, refused

EVAL = ["eval", "--model", "tiny-llama", "--skip", "1", "--tasks", "passkey", "--limit", "2", "--fidelity-pairs", "0"]
BENCH = ["bench", "--model", "tiny-llama", "--skip", "1", "--lengths", "16", "--repeats", "1", "--min-seconds", "0",
         "--decode-tokens", "0"]


def _refused(capsys, folder, *argv) -> str:
    return refused(capsys, *argv, folder=folder)


@pytest.fixture
def hostile(guard_renames, monkeypatch):
    monkeypatch.chdir(guard_renames)
    paths = hostile_paths(guard_renames / "hostile")
    yield paths
    assert_intact(paths)


@pytest.mark.parametrize("kind", ["fifo", "null", "full", "dangling", "folder"])
@pytest.mark.parametrize("command", [EVAL, BENCH, ["pareto", "--storage", "sqlite:///{d}/none.db"]],
                         ids=["eval", "bench", "pareto"])
def test_an_output_that_is_not_a_regular_file_is_refused_before_any_work(capsys, guard_renames, hostile, kind,
                                                                          command):
    argv = [a.replace("{d}", str(guard_renames)) for a in command]
    line = _refused(capsys, guard_renames, *argv, "--out", str(hostile[kind]))
    assert any(text in line for text in ("not a regular file", "is a directory", "link to a missing file")), line


@pytest.mark.parametrize("kind", ["fifo", "null", "folder"])
def test_a_tuner_table_that_is_not_a_regular_file_is_refused(capsys, guard_renames, hostile, kind):
    from pathlib import Path

    grid = Path(__file__).resolve().parents[1] / "tune" / "grid-fixture.csv"
    line = _refused(capsys, guard_renames, "tuners", "--grid", str(grid), "--seeds", "1", "--out", str(hostile[kind]))
    assert "not a regular file" in line or "is a directory" in line, line


@pytest.mark.parametrize("kind", ["fifo", "null", "full"])
def test_gpu_check_refuses_a_report_file_that_is_not_a_regular_file(capsys, guard_renames, hostile, kind):
    out = guard_renames / "report"
    out.mkdir()
    (out / "gpu-check.json").symlink_to(hostile[kind])
    line = _refused(capsys, guard_renames, "gpu-check", "--dry-run", "--out", str(out))
    assert "gpu-check.json" in line and "not a regular file" in line


def test_gpu_check_refuses_a_file_as_its_folder_and_a_read_only_folder(capsys, guard_renames, read_only_dir):
    (guard_renames / "notes.txt").write_text("mine\n")
    line = _refused(capsys, guard_renames, "gpu-check", "--dry-run", "--out", str(guard_renames / "notes.txt"))
    assert "is a file, not a folder" in line
    line = _refused(capsys, guard_renames, "gpu-check", "--dry-run", "--out", str(read_only_dir / "sub"))
    assert "cannot write in" in line


@pytest.mark.parametrize("budget", ["-5", "0"])
def test_gpu_check_refuses_a_budget_that_runs_nothing(capsys, guard_renames, budget):
    line = _refused(capsys, guard_renames, "gpu-check", "--dry-run", "--out", str(guard_renames / "r"), "--budget",
                    budget)
    assert "`--budget` must be positive seconds" in line


def test_tuners_refuse_a_negative_budget(capsys, guard_renames):
    line = _refused(capsys, guard_renames, "tuners", "--grid", "g.csv", "--max-drop", "-1")
    assert "--max-drop" in line and ">= 0" in line


def test_grid_refuses_a_negative_timeout_before_making_its_folder(capsys, guard_renames):
    out = guard_renames / "board"
    out.mkdir()
    line = _refused(capsys, guard_renames, "grid", "--model", "tiny-llama", "--tasks", "passkey", "--out", str(out),
                    "--timeout", "-1")
    assert "`--timeout` must be positive seconds" in line
    assert not (out / "raw").exists()


@pytest.mark.parametrize("item, message", [
    ("3/last/0/junk", "its K/V source must be one of own, calibrated, anchor, got 'junk'"),
    ("3/last/0/own/x", "takes SKIP/BOUNDARY/OFFSET items"),
    ("4/last/0/calibrated", "outside the search space"),  # the study searches own K/V only
])
def test_an_enqueued_fourth_field_is_read_never_ignored(capsys, guard_renames, item, message):
    line = _refused(capsys, guard_renames, "study", "--model", "tiny-llama", "--tasks", "passkey", "--limit", "2",
                    "--lengths", "300", "--storage", f"sqlite:///{guard_renames}/s.db", "--enqueue", item)
    assert message in line


def test_an_enqueued_calibrated_configuration_is_calibrated():
    from poptune.cli.study import _enqueued

    (config,) = _enqueued("4/last/0/calibrated")
    assert (config.skip, config.boundary, config.offset, config.kv) == (4, "last", 0, "calibrated")
    assert _enqueued("4/last/0")[0].kv == "own"
