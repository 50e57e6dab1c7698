"""The prepared GPU check runs end to end with ``--tiny`` (on CPU: the NVML and CUDA parts say why not)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from poptune.measure.nullcheck import AA_PAIRS

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def gpu_check(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("gpu_check", BENCHMARKS / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    for name in [n for n in sys.modules if n == "gpucheck" or n.startswith("gpucheck.")]:
        del sys.modules[name]


def test_tiny_check_writes_every_record(gpu_check, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    status = gpu_check.main(["--tiny", "--device", "cpu", "--out", str(tmp_path)])
    printed = capsys.readouterr().out
    data = json.loads((tmp_path / "gpu-check.json").read_text())
    summary = (tmp_path / "gpu-check.md").read_text()
    assert data["errors"] == {} and data["skipped"] == {}
    assert [c["status"] for c in data["preflight"]] == ["SKIP"] * 4  # no CUDA, no NVML: said, not failed
    # Rows: tiny-llama 2 lengths x 2 batches, tiny-gemma3 1, tiny-qwen3-vl one image.
    assert [(r["model"], r["length"] if not r["image"] else r["image"], r["batch"]) for r in data["rows"]] == [
        ("tiny-llama", 24, 1), ("tiny-llama", 48, 1), ("tiny-llama", 24, 2), ("tiny-llama", 48, 2),
        ("tiny-gemma3", 24, 1), ("tiny-qwen3-vl", "64x48", 1)]
    for row in data["rows"]:
        assert row["pairs"] == 3 and row["ideal"] > 1 and row["of_ideal"] == pytest.approx(row["speedup"] / row["ideal"])
        assert row["energy_full_j"] is None and "CPU device" in row["energy_reason"]
        assert row["kernels"] is None and row["launch_bound"] is None and "no GPU kernels" in row["reason"]
        assert row["timing"] == "eager"
    null = data["null_checks"]
    assert null["aa"]["pairs"] == AA_PAIRS and null["decode"]["pairs"] == 3  # the A/A test takes its own pairs
    scores = data["scores"]
    assert scores["status"] == "PASS" and scores["items"] == 50 and scores["max_abs_diff"] <= 1e-3
    assert len(data["benches"]) == 1 + 2 + 1 + 1  # null checks, tiny-llama per batch, tiny-gemma3, tiny-qwen3-vl
    for line in ("SKIP energy: cpu device: no CUDA, no NVML", "A/A tiny-llama @24:", "PASS scores: tiny-gemma3"):
        assert line in printed and line in summary
    fails = [line for line in printed.splitlines() if line.startswith("FAIL")]
    assert status == (1 if fails else 0)  # noisy shared CPUs may fail A/A: the status says so, loudly
    assert summary.count("| tiny-") == 6 and " --- " not in summary  # an unread clock range is one "-"


def test_full_check_without_cuda_stops_at_preflight(gpu_check, tmp_path: Path, capsys) -> None:
    assert gpu_check.main(["--device", "cpu", "--out", str(tmp_path)]) == 1
    printed = capsys.readouterr().out
    assert printed.strip() == "FAIL cuda: CUDA is not available: the full check needs one GPU (or pass --tiny)"
    assert json.loads((tmp_path / "gpu-check.json").read_text())["rows"] == []


def test_busy_union_counts_overlaps_once(gpu_check) -> None:
    from gpucheck.profile import busy_union, launch_bound

    assert busy_union([(0, 2), (1, 3), (5, 6), (5.5, 5.7)]) == 4
    assert launch_bound({"kernel_ms": 1.0}, 4.0)["launch_bound"] is True
    assert launch_bound({"kernel_ms": 3.0}, 4.0) | {} == {"kernel_ms": 3.0, "busy": 0.75, "launch_bound": False}
