"""The device script (benchmarks/gpu_device_run.sh) on CPU: its dry run completes and writes its summary and the
log's last line; its run is sized so a full run and a short rerun fit the device budget; a GPU that torch cannot
see is a FAIL, not a dry run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _script(tmp_path: Path, timeout: int = 400, **env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable, **env}
    return subprocess.run(["bash", "benchmarks/gpu_device_run.sh"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_dry_run_completes_and_writes_its_summary(tmp_path: Path) -> None:
    done = _script(tmp_path, DRY_RUN="1")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    summary = (tmp_path / "summary.md").read_text()
    for line in ("| versions | PASS |", "| gpu-check | PASS (dry run: stand-in models) |", "| cuda-tests | PASS |",
                 "DRY llama-3.1: its code path ran on stand-ins", "DRY qwen3-vl: its code path ran on stand-ins"):
        assert line in summary, summary
    assert "of at most 280 s" in summary
    written = ("device-run.log", "versions.txt", "cuda-tests.txt", "gpu-check/gpu-check.json", "gpu-check/gpu-check.md")
    for name in written:
        assert (tmp_path / name).is_file(), name  # everything under $OUT, written as it went
    # Issue 47 (8): the tee is waited for, so the log holds the script's last line.
    assert (tmp_path / "device-run.log").read_text().rstrip().splitlines()[-1].startswith("summary: ")


def _run_seconds(tmp_path: Path, **env: str) -> int:
    # A fake nvidia-smi listing no GPU and the version step failing at once stop the script right after it
    # prints its size: only the arithmetic runs.
    done = _script(tmp_path, timeout=60, PYTHON="false", **env)
    return int(re.search(r"run of at most (\d+) s", done.stdout).group(1))


def test_one_full_run_and_one_short_rerun_fit_the_device_budget(tmp_path: Path) -> None:
    # Issue 47 (5): 15 minutes of device time, each call paying a fresh machine's start-up of up to 4 minutes.
    budget, startup = 900, 240
    full = _run_seconds(tmp_path, DEVICE_BUDGET_S=str(budget))
    left = budget - startup - full - 20  # what status reports after the full run (20 s: transfers, give-back)
    rerun = _run_seconds(tmp_path, DEVICE_BUDGET_S=str(left), RERUN="1")
    assert 250 <= full <= 300 and 60 <= rerun <= 120
    assert startup + full + startup + rerun + 20 <= budget


def test_a_gpu_torch_cannot_see_is_a_fail_not_a_dry_run(tmp_path: Path) -> None:
    # Issue 47 (6): a fake nvidia-smi lists an H200; this machine's torch has no CUDA.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-22222222-aaaa-bbbb-cccc-000000000002)'\n")
    smi.chmod(0o755)
    out = tmp_path / "out"
    done = _script(out, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    summary = (out / "summary.md").read_text()
    assert done.returncode == 1 and "| gpu-check | FAIL (nvidia-smi lists a GPU but torch sees no CUDA) |" in summary
    assert "dry run" not in summary and not (out / "gpu-check" / "gpu-check.json").exists()
