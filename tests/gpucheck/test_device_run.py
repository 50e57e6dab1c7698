"""The device script's dry run on CPU (benchmarks/gpu_device_run.sh): it completes, every GPU stage says SKIP,
and its summary is written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_dry_run_completes_and_writes_its_summary(tmp_path: Path) -> None:
    env = {**os.environ, "OUT": str(tmp_path), "DRY_RUN": "1", "PYTHON": sys.executable}
    done = subprocess.run(["bash", "benchmarks/gpu_device_run.sh"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    summary = (tmp_path / "summary.md").read_text()
    for line in ("| versions | PASS |", "| gpu-check | PASS (dry run: stages SKIP) |", "| cuda-tests | PASS |",
                 "SKIP llama-3.1: dry run: no device work (expected ", "SKIP qwen3-vl: dry run"):
        assert line in summary, summary
    assert "of at most 390 s" in summary
    written = ("device-run.log", "versions.txt", "cuda-tests.txt", "gpu-check/gpu-check.json", "gpu-check/gpu-check.md")
    for name in written:
        assert (tmp_path / name).is_file(), name  # everything under $OUT, written as it went
