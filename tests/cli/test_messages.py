"""Messages that name what is wrong (issue 87, point 7): a corrupt journal record names its file and line, not
Optuna's raw exception ("Should not reach.", "'worker_id'"); compare's default ``--pop`` on a 6-layer model names
``--pop``; ``--items 0`` names ``--items``; a grid table saved with a byte-order mark reads; the Python API names
``max_drop`` and unknown tasks at once, takes one task as a string, and says a folder is a folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from poptune.errors import ConfigError, InputError
from tests.refusals import refused as _refused

ROOT = Path(__file__).resolve().parents[2]
JOURNAL = ROOT / "tests" / "reports" / "golden" / "fake-study.journal"
GRID = ROOT / "leaderboards" / "grid-gemma-3-270m-cpu-amd-epyc-2t.csv"


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


CORRUPT = {  # line 3 of a good journal, changed: (its new bytes, what the message says)
    "an unknown op_code": (lambda r: json.dumps(dict(r, op_code=99)).encode(),
                           "line 3: its op_code is 99, not one of Optuna's operations"),
    "no worker_id": (lambda r: json.dumps({k: v for k, v in r.items() if k != "worker_id"}).encode(),
                     "line 3: it names no worker_id"),
    "a list": (lambda r: b"[1, 2, 3]", "line 3: it is a JSON list, not a record"),
    "not UTF-8": (lambda r: b'{"op_code": 4, "x": "\xff"}', "line 3: byte 21 is not UTF-8 text"),
}


@pytest.mark.parametrize("command", [["pareto"], ["export", "--max-drop", "100"]])
@pytest.mark.parametrize("how", sorted(CORRUPT))
def test_a_corrupt_journal_record_is_named_by_file_and_line(capsys, scratch, command, how):
    change, said = CORRUPT[how]
    lines = JOURNAL.read_bytes().splitlines(keepends=True)
    lines[2] = change(json.loads(lines[2])) + b"\n"
    (scratch / "j.log").write_bytes(b"".join(lines))
    line = _refused(capsys, scratch, *command, "--storage", f"journal:{scratch}/j.log")
    assert f"journal {scratch}/j.log is corrupt, {said}" in line, line
    assert "Should not reach" not in line and "'worker_id'" not in line


def test_the_good_journal_reads():
    from poptune.store.journal import bad_record

    assert bad_record(JOURNAL) is None


def test_compares_default_pop_on_a_six_layer_model_names_pop(capsys, scratch, no_model_load):
    line = _refused(capsys, scratch, "compare", "--model", "tiny-llama", "--tasks", "passkey", "--workload", "w",
                    "--out", "o.json")
    assert "`--pop` (its default 6/last/0,7/window-64/0,9/window-64/0) names 6/last/0" in line
    assert "tiny-llama's 6 layers" in line


@pytest.mark.parametrize("command", [
    ["study", "--model", "tiny-llama", "--tasks", "passkey", "--storage", "sqlite:///s.db"],
    ["baseline", "--model", "tiny-llama", "--method", "sleb", "--tasks", "passkey"],
    ["compare", "--model", "tiny-llama", "--tasks", "passkey", "--workload", "w", "--out", "o.json"]])
def test_items_zero_names_items(capsys, scratch, no_model_load, command):
    line = _refused(capsys, scratch, *command, "--items", "0")
    assert "argument --items" in line and "got 0" in line and "`start`" not in line


def test_a_grid_table_with_a_byte_order_mark_reads(tmp_path):
    from poptune.problem.grid import read_grid

    marked = tmp_path / GRID.name
    marked.write_bytes(b"\xef\xbb\xbf" + GRID.read_bytes())
    assert read_grid(marked) == read_grid(GRID)


def test_a_folder_as_a_grid_says_it_is_a_folder(tmp_path):
    import gymnasium

    from poptune.env import REPLAY_ID

    with pytest.raises(InputError, match=r"grid file \. is a folder, not a grid file"):
        gymnasium.make(REPLAY_ID, grid=".")
    shutil.copyfile(GRID, tmp_path / "g.csv")
    with pytest.raises(ConfigError, match="`max_drop` must be accuracy points .* got 'two'"):
        gymnasium.make(REPLAY_ID, grid=str(tmp_path / "g.csv"), max_drop="two")


@pytest.mark.parametrize("value", ["two", True, [1.0]])
def test_max_drop_of_the_wrong_type_is_named(value):
    from poptune.env import TuningProblem

    with pytest.raises(ConfigError, match=r"`max_drop` must be accuracy points \(a number >= 0\) or None, got"):
        TuningProblem(model="tiny-llama", max_drop=value)


def test_an_unknown_task_is_refused_at_once_naming_it_and_the_known_ones():
    from poptune import EvalSpec
    from poptune.env import TuningProblem

    for make in (lambda t: TuningProblem(model="tiny-llama", tasks=t), lambda t: EvalSpec(tasks=t)):
        with pytest.raises(ConfigError, match=r"unknown task\(s\) 'no_such_task': use piqa, .*passkey, kv_recall"):
            make(("passkey", "no_such_task"))


def test_one_task_as_a_string_is_one_task():
    from poptune import EvalSpec
    from poptune.env import TuningProblem

    assert TuningProblem(model="tiny-llama", tasks="passkey").tasks == ("passkey",)
    assert EvalSpec(tasks="kv_recall").tasks == ("kv_recall",)
    assert TuningProblem(model="tiny-llama", tasks=["passkey"]) == TuningProblem(model="tiny-llama",
                                                                                tasks=("passkey",))
