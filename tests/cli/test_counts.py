"""Counts no task can supply are refused at once, in one line (issue 57): ``--certify 100000`` used to build
every certification item before measuring anything, and ``compare --skip 100000000`` the same."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest

from poptune.cli import main
from poptune.env import TuningProblem
from poptune.errors import ConfigError
from poptune.evaluate.workload import SYNTHETIC_MAX

DATA = Path(__file__).resolve().parents[1] / "data"
STUDY = ["study", "--model", "tiny-llama", "--tasks", "passkey", "--limit", "2", "--lengths", "300", "--repeats", "1",
         "--trials", "1"]


def _files(folder) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _refused(capsys, folder, *argv) -> str:
    """Run ``poptune argv``; assert exit 2, one stderr line, no file touched, within a second; return the line."""
    before = _files(folder)
    start = time.perf_counter()
    try:
        code = main(list(argv))
    except SystemExit as e:
        code = e.code
    elapsed = time.perf_counter() - start
    _, err = capsys.readouterr()
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert _files(folder) == before
    assert elapsed < 1.0, f"refused after {elapsed:.1f} s"
    return err.strip()


@pytest.fixture(scope="module", autouse=True)
def _imported():
    """The commands' modules (torch among them) imported once: what is timed is the check, not Python's imports."""
    import poptune.comparison.measure
    import poptune.evaluate.suite
    import poptune.problem.evaluator  # noqa: F401  (imported for its cost, not for a name)


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("option", [["--certify", "100000"], ["--certify", "1000000"],
                                    ["--limit", "20000"], ["--certify", str(SYNTHETIC_MAX)]])
def test_a_synthetic_count_beyond_its_generator_is_refused_at_once(capsys, scratch, option):
    line = _refused(capsys, scratch, *STUDY, "--storage", f"sqlite:///{scratch}/s.db", *option)
    assert f"synthetic task passkey supplies at most {SYNTHETIC_MAX}" in line and option[0] in line


def test_a_count_beyond_the_pack_is_refused(capsys, scratch):
    line = _refused(capsys, scratch, "study", "--model", "tiny-llama", "--tasks", "piqa", "--data-dir", str(DATA),
                    "--certify", "100", "--storage", f"sqlite:///{scratch}/s.db")
    assert "`--certify` 100 is more items than task piqa holds (8" in line


@pytest.mark.parametrize("tasks", [["--tasks", "passkey"], ["--tasks", "piqa", "--data-dir", str(DATA)]])
def test_compare_skipping_more_than_the_tasks_hold_is_refused(capsys, scratch, tasks):
    line = _refused(capsys, scratch, "compare", "--model", "tiny-llama", *tasks, "--workload", "w",
                    "--skip", "100000000", "--out", str(scratch / "o.json"))
    assert "--skip" in line


def test_the_problem_itself_bounds_synthetic_items():
    with pytest.raises(ConfigError, match="supplies at most"):
        TuningProblem(model="tiny-llama", tasks=("passkey",), limit=32, certify_limit=100_000)
    with pytest.raises(ConfigError, match="supplies at most"):
        TuningProblem(model="tiny-llama", tasks=("passkey",), limit=None)
    # without a budget nothing is certified: the certification's count builds no items
    TuningProblem(model="tiny-llama", tasks=("passkey",), limit=32, certify_limit=100_000, max_drop=None)


@pytest.mark.parametrize("option, said", [
    (["--pop", "2/last/0,2/last/0"], "twice"), (["--workload", " "], "must not be empty"),
    (["--pop", "2/last/0", "--methods", ""], "no baseline(s) given"),
    (["--pop", "2/last/0", "--methods", "shortgpt,shortgpt"], "twice")])  # a --pop that fits tiny-llama's 6 layers
def test_compare_refuses_empty_and_repeated_rows(capsys, scratch, option, said):
    line = _refused(capsys, scratch, "compare", "--model", "tiny-llama", "--tasks", "passkey", "--workload", "w",
                    "--out", str(scratch / "o.json"), *option)
    assert said in line


def test_a_study_of_no_tasks_is_refused_not_given_the_default(capsys, scratch):
    line = _refused(capsys, scratch, *STUDY, "--storage", f"sqlite:///{scratch}/s.db", "--tasks", "")
    assert "(none given)" in line


@pytest.mark.parametrize("argv", [
    ["study", "--model", "tiny-llama", "--trials", "100000000000000000000"],
    ["study", "--model", "tiny-llama", "--certify", "100000000000000000000"],
    ["study", "--model", "tiny-llama", "--add", "2000000"],
    ["study", "--model", "tiny-llama", "--repeats", "1e20"],
    ["study", "--model", "tiny-llama", "--max-pairs", "10000000"],
    ["compare", "--model", "tiny-llama", "--pairs", "10000000"],
    ["compare", "--model", "tiny-llama", "--decode-steps", "10000000"],
    ["generate", "--model", "tiny-llama", "--skip", "2", "--max-new-tokens", "10000000"],
    ["bench", "--model", "tiny-llama", "--skip", "2", "--decode-tokens", "10000000"],
])
def test_every_count_flag_refuses_what_no_plan_means_in_one_line(capsys, tmp_path, monkeypatch, argv):
    """Issue 57 (2): every integer flag is bounded (:data:`poptune.cli._checks.COUNT_MAX`), not only the item counts
    a task pack supplies: 1e20 pairs or trials is a typo, refused before anything starts."""
    monkeypatch.chdir(tmp_path)
    line = _refused(capsys, tmp_path, *argv)
    assert "must be an integer" in line
