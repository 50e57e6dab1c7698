"""--gpus workers: the supervisor pins, restarts killed workers, stops on errors; bad input is one line, exit 2."""

from __future__ import annotations

import sys

import pytest

from poptune.cli import main
from poptune.cli.study import _worker_argv
from poptune.tune.workers import WorkerCommand, parse_gpus, supervise

# Appends its CUDA_VISIBLE_DEVICES to a file; kills itself with SIGKILL the first time if asked to.
_WORKER = """
import os, pathlib, signal, sys
out, die_once = pathlib.Path(sys.argv[1]), sys.argv[2] == "1"
with out.open("a") as f:
    f.write(os.environ["CUDA_VISIBLE_DEVICES"] + "\\n")
if die_once and len(out.read_text().split()) == 1:
    os.kill(os.getpid(), signal.SIGKILL)
sys.exit(int(sys.argv[3]))
"""


def _worker(tmp_path, gpu, *, die_once=False, code=0):
    return WorkerCommand((sys.executable, "-c", _WORKER, str(tmp_path / f"gpu{gpu}"), str(int(die_once)), str(code)),
                         gpu)


def test_each_worker_is_pinned_to_its_gpu(tmp_path):
    assert supervise([_worker(tmp_path, g) for g in (0, 3)], poll_s=0.01) == 0
    assert (tmp_path / "gpu0").read_text() == "0\n" and (tmp_path / "gpu3").read_text() == "3\n"


def test_a_killed_worker_is_restarted_and_a_failed_one_is_not(tmp_path, capsys):
    assert supervise([_worker(tmp_path, 0, die_once=True), _worker(tmp_path, 1)], poll_s=0.01) == 0
    assert (tmp_path / "gpu0").read_text() == "0\n0\n"  # killed once, started again
    assert "restarting it (1/3)" in capsys.readouterr().err
    assert supervise([_worker(tmp_path, 2, code=2), _worker(tmp_path, 4)], poll_s=0.01) == 2
    assert (tmp_path / "gpu2").read_text() == "2\n"


def test_a_worker_killed_every_time_is_given_up(tmp_path):
    worker = WorkerCommand((sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"), 0)
    assert supervise([worker], max_restarts=2, poll_s=0.01) == 128 + 9


def test_workers_get_the_parents_options_and_their_own():
    argv = ["study", "--model", "tiny-llama", "--gpus", "0,1", "--trials=8", "--device", "cpu", "--storage",
            "journal:j"]
    worker = _worker_argv(argv, 20)
    assert worker[1:4] == ("-m", "poptune", "study")
    assert list(worker[4:]) == ["--model", "tiny-llama", "--storage", "journal:j", "--device", "cuda",
                                "--trials", "20", "--worker"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--gpus", "0,x"], "comma-separated GPU indices"),
        (["--gpus", "1,1"], "names a GPU twice"),
        (["--gpus", "0,1"], "SQLite is for one"),
        (["--gpus", "0,1", "--storage", "journal:{tmp}/j.log"], "CUDA is not available"),
        (["--trials", "3", "--add", "5"], "not allowed with"),
        (["--gpus", "0,1", "--storage", "journal:{tmp}/j.log", "--trials", "0"], "`trials` must be a positive"),
        (["--gpus", "0,1", "--storage", "journal:{tmp}/j.log", "--add", "0"], "`add` must be a positive"),
    ],
)
def test_bad_gpus_are_one_line_exit_2(capsys, tmp_path, argv, message):
    import torch

    if "CUDA is not available" in message and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    try:
        code = main(["study", "--model", "tiny-llama", "--tasks", "embedded", *argv])
    except SystemExit as e:  # argparse
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == []


def test_parse_gpus():
    assert parse_gpus("0, 2,3") == [0, 2, 3]


def test_study_budgets_name_each_gpus_study_and_grow_it_by_add(tmp_path):
    import optuna

    from poptune import store
    from poptune.tune.workers import study_budgets

    url = f"sqlite:///{tmp_path}/s.db"
    storage = store.open_storage(url, heartbeat=None)
    study = optuna.create_study(study_name="shared", storage=storage, directions=["minimize", "maximize"])
    study.add_trial(optuna.trial.create_trial(values=[1.0, 0.5], user_attrs={"config": {"skip": 0, "boundary": "last",
                                                                                        "offset": 0}}))
    names, budgets = study_budgets(storage, [0, 1], model="tiny-llama", study="shared", trials=12, add=None)
    assert names == {0: "shared", 1: "shared"} and budgets == {"shared": 12}
    assert study_budgets(storage, [0], model="tiny-llama", study="shared", trials=12, add=3)[1] == {"shared": 4}
    assert study_budgets(storage, [0], model="tiny-llama", study="new", trials=12, add=3)[1] == {"new": 3}
