"""The device script's dry run under the GPU machine's package set (poptune/gpucheck/device_packages.txt): every
third-party package not on that list is made absent for poptune's code (tests/gpucheck/device_image), so a stage
that would import one on the device fails here, in a CPU test, not on a lent GPU (issue 47)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from poptune import cache

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ROOT / "poptune" / "gpucheck" / "device_packages.txt"
GUARD = ROOT / "tests" / "gpucheck" / "device_image"


def _guarded(tmp_path: Path) -> tuple[dict[str, str], Path]:
    log = tmp_path / "blocked.txt"
    env = {**os.environ, "POPTUNE_DEVICE_PACKAGES": str(PACKAGES), "POPTUNE_DEVICE_BLOCKED": str(log),
           "PYTHONPATH": os.pathsep.join([str(GUARD), str(ROOT)]), "PYTHON": sys.executable,
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    return env, log


def test_the_package_list_is_one_file_with_its_date_and_source() -> None:
    lines = PACKAGES.read_text().splitlines()
    head = " ".join(line for line in lines if line.startswith("#"))
    names = [line for line in lines if line and not line.startswith("#")]
    assert "KINDS.md" in head and "2026-11-17" in head and "copied here on 20" in head
    assert {"torch", "transformers", "nvidia-ml-py", "regex", "scipy", "filelock"} <= set(names)
    assert "platformdirs" not in names and len(names) == len(set(names)) > 150


def test_the_device_scripts_dry_run_imports_nothing_outside_the_device_image(tmp_path: Path) -> None:
    env, log = _guarded(tmp_path)
    env.update(OUT=str(tmp_path / "out"), DRY_RUN="1")
    done = subprocess.run(["bash", "benchmarks/gpu_device_run.sh"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)
    summary = (tmp_path / "out" / "summary.md").read_text()
    blocked = log.read_text().splitlines()
    assert sum(line.startswith("active ") for line in blocked) >= 3  # versions, the check, the CUDA tests
    assert [line for line in blocked if line.startswith("import ")] == [], blocked
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    # One dry run (about 40 s here) serves the script's own checks too: its summary, every file under $OUT
    # written as it went, and the log's last line (the tee waited for, issue 47 (8)).
    for line in ("| versions | PASS |", "| gpu-check | PASS (dry run: stand-in models) |", "| cuda-tests | PASS |",
                 "DRY llama-3.1: its code path ran on stand-ins", "DRY qwen3-vl: its code path ran on stand-ins"):
        assert line in summary, summary
    assert "of at most 560 s" in summary  # no DEVICE_BUDGET_S: a dry run sizes for 900 s
    written = ("device-run.log", "versions.txt", "cuda-tests.txt", "gpu-check/gpu-check.json", "gpu-check/gpu-check.md")
    for name in written:
        assert (tmp_path / "out" / name).is_file(), name
    assert (tmp_path / "out" / "device-run.log").read_text().rstrip().splitlines()[-1].startswith("summary: ")
    data = json.loads((tmp_path / "out" / "gpu-check" / "gpu-check.json").read_text())
    assert data["dry_run"] and data["errors"] == {}
    assert list(data["seconds"]) == ["llama-3.1", "gemma-3-12b", "qwen3-vl"]  # every stage ran (issue 89: no scores)
    assert {r["model"] for r in data["rows"]} == {"llama-3.1", "gemma-3-12b", "qwen3-vl"}
    graphed = [r for r in data["rows"] if r.get("graphs")]  # issue 89: graphed rows, timed eagerly on a CPU
    assert [(r["model"], r["batch"]) for r in graphed] == [("llama-3.1", 1)] * 2 + [("qwen3-vl", 1)]
    assert all("CUDA graphs need a CUDA device" in r["graphs_reason"] for r in graphed)
    assert [extra["length"] for extra in data["aa_more"]] == [16]  # the A/A at 512, at its stand-in length




def test_the_guard_fails_a_stage_that_imports_platformdirs(tmp_path: Path) -> None:
    # Without issue 47's fix (1): the gemma-3-12b stage reaches cache.cache_dir() through the registry's tokenizer
    # look-up, which imported platformdirs; on the device that broke the stage after its weights were built.
    code = ("import sys, json\nfrom pathlib import Path\nimport poptune.cache as cache\n"
            "def old_cache_dir():\n    import platformdirs\n"
            "    return Path(platformdirs.user_cache_dir('poptune', appauthor=False))\n"
            "cache.cache_dir = old_cache_dir\n"
            "from poptune.gpucheck.check import run\n"
            "report = run(Path(sys.argv[1]), tiny=False, device=None, dry_run=True)\n"
            "print(json.dumps(report.data['errors']))\n")
    env, log = _guarded(tmp_path)
    env.pop("POPTUNE_CACHE", None)
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "out")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=400)
    errors = json.loads(done.stdout.strip().splitlines()[-1])
    assert "platformdirs" in errors["gemma-3-12b"] and "scores" not in errors  # the full plan has no scores stage
    assert any(line.startswith("import platformdirs ") for line in log.read_text().splitlines())


@pytest.mark.skipif(sys.platform in ("darwin", "win32"), reason="the XDG rule is Linux's (platformdirs elsewhere)")
def test_the_cache_folder_needs_no_platformdirs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "platformdirs", None)  # `import platformdirs` raises, as on the device
    monkeypatch.delenv("POPTUNE_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", " ")  # blank: the default, as platformdirs reads it
    assert cache.cache_dir() == tmp_path / "home" / ".cache" / "poptune"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == tmp_path / "xdg" / "poptune"
