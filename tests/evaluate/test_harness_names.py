"""The lm-eval route never hands poptune's synthetic task names to lm-eval's registry (which has others)."""

from __future__ import annotations

import pytest

from poptune.evaluate.harness import SYNTHETIC, check_tasks


@pytest.mark.parametrize("argv", [
    ["run", "--tasks", "passkey"],
    ["run", "--tasks=piqa,kv_recall"],
    ["run", "--tasks", "piqa", "passkey", "--model", "poptune"],  # lm-eval's --tasks takes space-separated names
    ["run", "-t", "piqa", "kv_recall"],
    ["run", "--tasks", "piqa", "--tasks", "passkey"],  # given twice: lm-eval extends the list
])
def test_synthetic_names_are_refused_in_one_line(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        check_tasks(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and len(err.strip().splitlines()) == 1 and "poptune eval --tasks" in err


def test_lm_eval_tasks_pass():
    check_tasks(["run", "--model", "poptune", "--tasks", "piqa,arc_easy"])
    check_tasks(["run", "--tasks", "piqa", "arc_easy", "--model_args", "skip=6", "--output_path", "passkey"])
    assert set(SYNTHETIC) == {"passkey", "kv_recall"}
