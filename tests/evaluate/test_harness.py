"""``python -m poptune.evaluate.harness``: lm-eval's own command line with the poptune model and task pack."""

import os
import subprocess
import sys


def test_lm_eval_cli_runs_the_poptune_model_on_local_data(eval_data, tmp_path):
    env = {**os.environ, "POPTUNE_DATA": str(eval_data), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "poptune.evaluate.harness", "run", "--model", "poptune",
         "--model_args", "pretrained=tiny-llama,skip=2,boundary=last", "--tasks", "piqa", "--limit", "3",
         "--device", "cpu"],
        env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "|piqa" in out.stdout and "acc_norm" in out.stdout
