"""The device script (benchmarks/gpu_device_run.sh) on CPU: its run is sized so a full run and a short rerun fit
the device budget; a GPU that torch cannot see is a FAIL, not a dry run. Its dry run, summary and log are checked
under the device image's package set (tests/gpucheck/test_device_image.py)."""

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


def _run_seconds(tmp_path: Path, **env: str) -> int:
    # A fake nvidia-smi listing no GPU and the version step failing at once stop the script right after it
    # prints its size: only the arithmetic runs.
    done = _script(tmp_path, timeout=60, PYTHON="false", **env)
    return int(re.search(r"run of at most (\d+) s", done.stdout).group(1))


def test_one_call_is_sized_to_the_budget_left(tmp_path: Path) -> None:
    # Issue 59 (1): one call sized to what status reports (a start-up of up to 4 minutes and 20 s of transfers
    # paid), at most 560 s (timeout_s 600); a rerun is kept only where the budget holds a second call
    # (tests/gpucheck/test_time_plan.py shows every model admitted).
    # Issue 89: the start-up assumed is the last run's (30 s), not the worst guess of 240 s.
    assert _run_seconds(tmp_path, DEVICE_BUDGET_S="900") == 560  # 850 - 50 - 120 = 680: a rerun's room kept
    assert _run_seconds(tmp_path, DEVICE_BUDGET_S="650") == 560  # 600 < 520 + 170: one call, capped
    assert _run_seconds(tmp_path, DEVICE_BUDGET_S="400") == 350
    assert _run_seconds(tmp_path, DEVICE_BUDGET_S="400", STARTUP_S="240") == 140  # the old assumption: refused


def test_a_gpu_torch_cannot_see_is_a_fail_not_a_dry_run(tmp_path: Path) -> None:
    # Issue 47 (6): a fake nvidia-smi lists an H200; this machine's torch has no CUDA.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-22222222-aaaa-bbbb-cccc-000000000002)'\n")
    smi.chmod(0o755)
    out = tmp_path / "out"
    done = _script(out, DEVICE_BUDGET_S="900", PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    summary = (out / "summary.md").read_text()
    assert done.returncode == 1 and "| gpu-check | FAIL (a GPU is there but torch sees no CUDA) |" in summary
    assert "dry run" not in summary and not (out / "gpu-check" / "gpu-check.json").exists()
