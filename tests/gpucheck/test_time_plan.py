"""Issue 59: the device time plan measures every model inside the device time, admission keeps a margin and
counts from the script's start, a stage cut by the time limit keeps its rows, and the labels say what ran. CPU
only, with fakes (a fake profiler, fake rows, fake GPU device nodes)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from poptune.gpucheck import check, profile
from poptune.gpucheck.plan import ADMIT_FACTOR, full_plan, plan_seconds

ROOT = Path(__file__).resolve().parents[2]
PRE_STEPS_S = 25  # install (~10 s) and the versions step with the CUDA probe (~15 s) before the check starts
GRACE_S = 10  # the script's GRACE_SECONDS


def _script(tmp_path: Path, timeout: int = 120, **env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable, **env}
    return subprocess.run(["bash", "benchmarks/gpu_device_run.sh"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def _sized(tmp_path: Path, budget: int) -> tuple[int, str]:
    done = _script(tmp_path, PYTHON="false", DEVICE_BUDGET_S=str(budget))  # stops at the versions step
    found = re.search(r"run of at most (\d+) s .* room for a rerun: (\w+)", done.stdout)
    return int(found.group(1)), found.group(2)


def _admitted(run_seconds: int) -> list[tuple[str, float]]:
    """The check's admission in one call, each admitted stage taking ADMIT_FACTOR x its estimate (the worst its
    margin covers): (model, seconds left over its admission figure) per admitted stage."""
    left, admitted = run_seconds - PRE_STEPS_S - GRACE_S, []
    for case, parts in zip(full_plan().cases, plan_seconds(full_plan()), strict=True):
        if parts["admit"] <= left:
            admitted.append((case.model, round(left - parts["admit"], 1)))
            left -= ADMIT_FACTOR * parts["total"]
    return admitted


@pytest.mark.parametrize(("budget", "run", "rerun", "margins"), [
    # issue 89's plan: 12 pairs a row at least, A/A at 512 and 2,048, graphed rows on both sides, no scores stage
    (900, 560, "yes", {"llama-3.1": 320.8, "gemma-3-12b": 184.5, "qwen3-vl": 119.3}),
    (600, 550, "no", {"llama-3.1": 310.8, "gemma-3-12b": 174.5, "qwen3-vl": 109.3}),
])
def test_every_model_is_admitted_in_the_call_the_budget_allows(tmp_path: Path, budget: int, run: int, rerun: str,
                                                                margins: dict) -> None:
    # 900 s with a start-up of 30 s (what the last run measured): one call of 560 s and room for a rerun; 600 s
    # left after a failed try: one call of 550 s. Llama-3.1-8B, Gemma-3-12B and Qwen3-VL are each admitted, every
    # stage running 25% over its estimate.
    seconds, room = _sized(tmp_path, budget)
    assert (seconds, room) == (run, rerun) and seconds + 40 <= 600  # timeout_s within one command's limit
    admitted = dict(_admitted(seconds))
    assert list(admitted) == ["llama-3.1", "gemma-3-12b", "qwen3-vl"], admitted
    assert all(m >= 0 for m in admitted.values()) and admitted == pytest.approx(margins, abs=1.0)


def test_the_script_needs_at_least_what_the_plan_admits() -> None:
    text = (ROOT / "benchmarks" / "gpu_device_run.sh").read_text()
    need = int(re.search(r"^NEED_S=(\d+)", text, re.M).group(1))
    tests = int(re.search(r"^TESTS_SECONDS=(\d+)", text, re.M).group(1))
    assert need >= sum(p["admit"] for p in plan_seconds(full_plan())) + PRE_STEPS_S + GRACE_S + tests


def test_a_budget_too_small_or_missing_is_refused(tmp_path: Path) -> None:
    assert _script(tmp_path, PYTHON="false", DEVICE_BUDGET_S="190").returncode == 2  # 140 s: nothing measured
    done = _script(tmp_path, PYTHON="false", DEVICE_BUDGET_S="")
    assert done.returncode == 2 and "DEVICE_BUDGET_S" in done.stderr


def test_the_preflight_here_refuses_a_call_without_the_wheels_that_ran(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "transformers-5.25.0-py3-none-any.whl").write_text("")
    done = _script(tmp_path, PREFLIGHT="1", DEVICE_BUDGET_S="900", WHEELS_DIR=str(wheels))
    # transformers 5.25 checks huggingface-hub >= 2.4 at import; the H200 image has 1.33 (seen 2026-12-04).
    assert done.returncode == 1 and "huggingface_hub==2.4.0" in done.stderr and "transformers==" not in done.stderr
    pins = re.search(r'^WHEELS="([^"]*)"', (ROOT / "benchmarks" / "gpu_device_run.sh").read_text(), re.M).group(1)
    for pin in pins.split():
        name, version = pin.split("==")
        (wheels / f"{name}-{version}-py3-none-any.whl").write_text("")
    repo = _repo(tmp_path / "repo")
    done = _script(tmp_path, PREFLIGHT="1", DEVICE_BUDGET_S="900", WHEELS_DIR=str(wheels), **repo)
    assert done.returncode == 0 and 'carry=[".whl"], timeout_s=600' in done.stdout


def _git(repo: dict, *args: str) -> str:
    return subprocess.run(["git", *args], env={**os.environ, **repo}, capture_output=True, text=True,
                          check=True).stdout.strip()


def _repo(path: Path) -> dict:
    """A throwaway clean git repository the script's git commands read (GIT_DIR, GIT_WORK_TREE), one commit."""
    path.mkdir()
    repo = {"GIT_DIR": str(path / ".git"), "GIT_WORK_TREE": str(path), "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    _git(repo, "init", "-q")
    (path / "poptune" / "measure").mkdir(parents=True)
    (path / "poptune" / "measure" / "timer.py").write_text("1\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "one")
    return repo


def test_the_preflight_refuses_uncommitted_changes_and_names_the_commit_and_the_changed_tests(tmp_path: Path) -> None:
    # Issue 89: the device run measures a clean commit, and runs only the CUDA tests whose code changed.
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    pins = re.search(r'^WHEELS="([^"]*)"', (ROOT / "benchmarks" / "gpu_device_run.sh").read_text(), re.M).group(1)
    for pin in pins.split():
        name, version = pin.split("==")
        (wheels / f"{name}-{version}-py3-none-any.whl").write_text("")
    repo = _repo(tmp_path / "repo")
    first = _git(repo, "rev-parse", "HEAD")
    (tmp_path / "repo" / "poptune" / "measure" / "timer.py").write_text("2\n")
    args = dict(PREFLIGHT="1", DEVICE_BUDGET_S="900", WHEELS_DIR=str(wheels), **repo)
    done = _script(tmp_path, **args)
    assert done.returncode == 1 and "uncommitted changes" in done.stderr and "timer.py" in done.stderr
    _git(repo, "commit", "-qam", "two")
    head = _git(repo, "rev-parse", "HEAD")
    done = _script(tmp_path, **args)  # no CUDA_TESTS_PASSED_AT: every CUDA test file
    assert done.returncode == 0 and f"POPTUNE_COMMIT={head} " in done.stdout
    assert 'CUDA_TESTS=\\"tests/measure/test_cuda.py tests/evaluate/test_answers_shared.py\\"' in done.stdout
    done = _script(tmp_path, CUDA_TESTS_PASSED_AT=first, **args)  # poptune/measure changed: test_cuda.py only
    assert 'CUDA_TESTS=\\"tests/measure/test_cuda.py\\"' in done.stdout, done.stdout
    done = _script(tmp_path, CUDA_TESTS_PASSED_AT=head, **args)  # nothing changed since they passed
    assert 'CUDA_TESTS=\\"none\\"' in done.stdout


def test_a_gpu_device_node_without_cuda_is_a_fail_not_a_dry_run(tmp_path: Path) -> None:
    # Issue 59 (4): no nvidia-smi on the PATH, but the driver's device node is there (a fake file).
    node = tmp_path / "nvidia0"
    node.write_text("")
    out = tmp_path / "out"
    done = _script(out, timeout=300, DEVICE_BUDGET_S="900", NVIDIA_DEV=str(node),
                   NVIDIA_PROC=str(tmp_path / "none"))
    summary = (out / "summary.md").read_text()
    assert done.returncode == 1 and "| gpu-check | FAIL (a GPU is there but torch sees no CUDA) |" in summary
    assert "dry run" not in summary.lower()


def test_no_cuda_events_from_the_profiler_is_busy_unknown_not_launch_bound(monkeypatch) -> None:
    # Issue 59 (4), with a fake profiler that delivers no CUDA events (as in a VM without CUPTI).
    import torch
    import torch.profiler

    class FakeProfile:
        def __init__(self, **kw) -> None: ...
        def __enter__(self): return self
        def __exit__(self, *a) -> None: ...
        def events(self): return []

    monkeypatch.setattr(torch.profiler, "profile", FakeProfile)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    profiled = profile.profile_call(lambda: None, torch.device("cuda"))
    labelled = profile.launch_bound(profiled, latency_ms=10.0)
    assert labelled["busy"] is None and labelled["launch_bound"] is None and "no CUDA events" in labelled["reason"]


def _fake_row(model: str, length: int, batch: int) -> dict:
    return {"model": model, "image": None, "length": length, "batch": batch, "full_ms": 2.0, "pop_ms": 1.5,
            "speedup": 1.3, "speedup_lo": 1.2, "speedup_hi": 1.4, "pairs": 12, "ideal": 1.4, "of_ideal": 0.93,
            "idle_w": None,
            "sm_clock_mhz_min": None, "power_w_max": None, "temperature_c_max": None, "clock_reasons": [],
            "kernels": None, "busy": None, "launch_bound": None, "throttled": False}


def test_a_stage_cut_by_the_time_limit_keeps_its_rows_and_a_rerun_measures_the_rest(tmp_path: Path,
                                                                                      monkeypatch) -> None:
    seen = []
    ratio = {"speedup": 1.0, "lo": 0.99, "hi": 1.01, "pairs": 16}
    monkeypatch.setenv("POPTUNE_COMMIT", "1234abc")  # both runs at one clean commit
    monkeypatch.setattr(check, "load_model", lambda *a, **k: (object(), None))
    monkeypatch.setattr(check, "null_checks", lambda *a: {"model": "tiny-llama", "length": 24, "aa": ratio,
                                                          "decode": ratio, "bench": {"model": "tiny-llama"}})

    def cut(model, tokenizer, case, plan, on_row, done=frozenset(), spare=None):
        seen.append((case.model, set(done)))
        if case.model == "tiny-llama" and not done:
            on_row(_fake_row(case.model, 24, 1), {"model": case.model})
            raise check.TimeLimit("signal 15")  # what SIGTERM raises

    monkeypatch.setattr(check, "measure_case", cut)
    check.run(tmp_path, tiny=True, device="cpu", budget=1e4)
    data = json.loads((tmp_path / "gpu-check.json").read_text())
    assert data["errors"]["tiny-llama"].startswith("cut by the time limit after 1 rows")
    assert [r["length"] for r in data["rows"]] == [24] and "tiny-gemma3" not in data["seconds"]  # stopped there
    check.run(tmp_path, tiny=True, device="cpu", budget=1e4)  # the rerun on the same folder
    assert seen[-3][0] == "tiny-llama" and seen[-3][1] == {(1, 24, False)}  # only the rows not measured
    assert json.loads((tmp_path / "gpu-check.json").read_text())["rows"][0]["length"] == 24
    monkeypatch.setenv("POPTUNE_COMMIT", "5678def")  # issue 89: a new commit measures every row again
    check.run(tmp_path, tiny=True, device="cpu", budget=1e4)  # (cut again in its first stage, as in the first run)
    assert seen[-1] == ("tiny-llama", set())
    data = json.loads((tmp_path / "gpu-check.json").read_text())
    assert data["commit"] == "5678def" and any("made at 1234abc" in note for note in data["notes"])


def test_rows_of_another_card_are_measured_again(tmp_path: Path, monkeypatch) -> None:
    from poptune.gpucheck.plan import tiny_plan
    from poptune.gpucheck.report import Report

    monkeypatch.setenv("POPTUNE_COMMIT", "1234abc")
    old = Report(tmp_path, tiny_plan(), "cuda", commit="1234abc")
    old.data["hardware"] = {"hardware_id": "nvidia-h200"}
    old.data["seconds"] = {"tiny-llama": 1.0}
    old.add_row(_fake_row("tiny-llama", 24, 1), {"model": "tiny-llama"})
    same = Report.resume(tmp_path, tiny_plan(), "cuda", "1234abc")
    same.keep_card({"hardware_id": "nvidia-h200"})
    assert same.data["kept"] == ["tiny-llama"] and len(same.data["rows"]) == 1
    assert same.board() == "leaderboards/gpu-check-nvidia-h200.md" or same.data["hardware"] is None
    other = Report.resume(tmp_path, tiny_plan(), "cuda", "1234abc")
    other.keep_card({"hardware_id": "nvidia-h100-80gb-hbm3"})
    assert other.data["kept"] == [] and other.data["rows"] == []
    assert any("measured nvidia-h200" in note for note in other.data["notes"])
    other.data["hardware"] = {"hardware_id": "nvidia-h100-80gb-hbm3"}
    assert other.board() == "leaderboards/gpu-check-nvidia-h100-80gb-hbm3.md"
    assert "Board: `leaderboards/gpu-check-nvidia-h100-80gb-hbm3.md`" in other.markdown()
    dirty = Report.resume(tmp_path, tiny_plan(), "cuda", "1234abc+dirty")
    assert dirty.data["rows"] == []  # a dirty tree's rows are never kept


def test_wide_rows_are_measured_again_while_the_later_stages_spare_the_time(monkeypatch) -> None:
    from poptune.gpucheck import rows
    from poptune.gpucheck.plan import Case, full_plan

    plan, case = full_plan(), Case("llama-3.1", 10, (512, 2048))
    calls: list = []

    def fake(model, tokenizer, case, plan, batch, lengths, graphs, on_row, first=None):
        calls.append((lengths, first is not None))
        width = 0.10 if lengths == (512,) and first is None else 0.01  # 512 comes out wide the first time
        row = {**_fake_row(case.model, lengths[0], batch), "speedup_lo": 1.3 - width, "speedup_hi": 1.3 + width}
        on_row(row, {})
        return row

    monkeypatch.setattr(rows, "_measure_row", fake)
    rows.measure_case(None, None, case, plan, lambda *a: None, spare=lambda: 1e4)
    assert calls == [((512,), False), ((2048,), False), ((512,), True)]
    calls.clear()
    rows.measure_case(None, None, case, plan, lambda *a: None, spare=lambda: 0.0)  # no time: not again
    assert calls == [((512,), False), ((2048,), False)]


def test_the_full_plan_has_honest_rows_and_no_stage_that_cannot_run_on_the_device() -> None:
    from poptune.gpucheck.plan import MIN_PAIRS, case_rows, full_plan
    from poptune.gpucheck.rows import row_items

    plan = full_plan()
    assert plan.policy.min_repeats == MIN_PAIRS >= 12 and not plan.scores
    assert plan.null_case.lengths == (2048, 512)  # an A/A at both
    llama, _, qwen = plan.cases
    assert [(b, n) for b, n, g in row_items(llama) if g] == [(1, (512,)), (1, (2048,))]
    assert [g for _, _, g in row_items(qwen)] == [False, True]
    assert case_rows(plan, qwen)[-1] == (920, 1)  # the graphed image row: the image's tokens


def test_the_deadline_is_the_callers_not_the_checks_start(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(check, "load_model", lambda *a, **k: (_ for _ in ()).throw(AssertionError("started")))
    check.run(tmp_path, tiny=True, device="cpu", budget=1e4, deadline=time.time() + 3)
    data = json.loads((tmp_path / "gpu-check.json").read_text())
    assert data["skipped"]["tiny-llama"].startswith("time budget spent")
    assert data["admitted"]["tiny-llama"]["left"] <= 3
