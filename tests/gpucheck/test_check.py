"""The prepared GPU check runs end to end with ``--tiny`` (on CPU: the NVML and CUDA parts say why not)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from poptune.cli import main
from poptune.gpucheck import check
from poptune.measure.nullcheck import AA_PAIRS

ROOT = Path(__file__).resolve().parents[2]


def test_tiny_check_writes_every_record(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    status = main(["gpu-check", "--tiny", "--device", "cpu", "--out", str(tmp_path)])
    printed = capsys.readouterr().out
    data = json.loads((tmp_path / "gpu-check.json").read_text())
    summary = (tmp_path / "gpu-check.md").read_text()
    assert data["errors"] == {} and data["skipped"] == {}
    statuses = [(c["name"], c["status"]) for c in data["preflight"]]
    names = [n for n, _ in statuses[:-4]]
    wanted = {"scipy", "transformers", "regex", "tokenizers", "huggingface-hub", "safetensors", "nvidia-ml-py"}
    assert wanted <= set(names)
    assert {s for _, s in statuses[:-4]} == {"PASS"}  # the version lines
    assert [s for _, s in statuses[-4:]] == ["SKIP"] * 4  # no CUDA, no NVML: said, not failed
    # Rows: tiny-llama 2 lengths x 2 batches, tiny-gemma3 1, tiny-qwen3-vl one image.
    assert [(r["model"], r["length"] if not r["image"] else r["image"], r["batch"]) for r in data["rows"]] == [
        ("tiny-llama", 24, 1), ("tiny-llama", 48, 1), ("tiny-llama", 24, 2), ("tiny-llama", 48, 2),
        ("tiny-gemma3", 24, 1), ("tiny-qwen3-vl", "64x48", 1)]
    for row in data["rows"]:
        assert row["pairs"] == 3 and row["ideal"] > 1
        assert row["of_ideal"] == pytest.approx(row["speedup"] / row["ideal"])
        assert row["energy_full_j"] is None and "CPU device" in row["energy_reason"]
        assert row["kernels"] is None and row["launch_bound"] is None and "no GPU kernels" in row["reason"]
        assert row["timing"] == "eager"
    null = data["null_checks"]
    assert null["aa"]["pairs"] == AA_PAIRS and null["decode"]["pairs"] == 3  # the A/A test takes its own pairs
    scores = data["scores"]
    assert scores["status"] == "PASS" and scores["items"] == 50 and scores["max_abs_diff"] <= 1e-3
    assert len(data["benches"]) == 1 + 6  # the null checks, then one bench run per row
    for line in ("SKIP energy: cpu device: no CUDA, no NVML", "A/A tiny-llama @24:", "PASS scores: tiny-gemma3"):
        assert line in printed and line in summary
    fails = [line for line in printed.splitlines() if line.startswith("FAIL")]
    assert status == (1 if fails else 0)  # noisy shared CPUs may fail A/A: the status says so, loudly
    assert summary.count("| tiny-") == 6 and " --- " not in summary  # an unread clock range is one "-"


def test_full_check_without_cuda_stops_at_preflight(tmp_path: Path, capsys) -> None:
    assert main(["gpu-check", "--device", "cpu", "--out", str(tmp_path)]) == 1
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed[-1] == "FAIL cuda: CUDA is not available: the full check needs one GPU (or pass --tiny)"
    assert all(line.startswith("PASS ") for line in printed[:-1]) and "PASS transformers: " in "\n".join(printed)
    assert json.loads((tmp_path / "gpu-check.json").read_text())["rows"] == []


def test_a_stage_that_cannot_finish_in_the_budget_left_is_skipped_not_started(tmp_path: Path, monkeypatch) -> None:
    started = []
    monkeypatch.setattr(check, "load_model", lambda *a, **k: started.append(a) or (_ for _ in ()).throw(
        AssertionError("a stage over budget must not start")))
    check.run(tmp_path, tiny=True, device="cpu", budget=5.0)  # each tiny stage expects more than 5 s
    data = json.loads((tmp_path / "gpu-check.json").read_text())
    assert not started and data["errors"] == {} and "tiny-llama" in data["skipped"]
    assert data["skipped"]["tiny-llama"].startswith("time budget spent (expected ")


def test_the_full_plan_fits_its_budget_by_its_own_arithmetic() -> None:
    from poptune.gpucheck.plan import full_plan, stage_seconds

    plan = full_plan()
    parts = [stage_seconds(plan, case, first_import=i == 0, first_profile=i == 0) for i, case in enumerate(plan.cases)]
    total = sum(p["total"] for p in parts) + check.SCORES_SECONDS
    assert total <= check.BUDGET_SECONDS
    assert parts[0]["import"] > 0 and all(p["build"] > 10 and p["profiler"] > 0 for p in parts)
    assert plan.policy.warmup_seconds >= 1.0  # every row warms up a second at its own shape first


def test_version_preflight_says_what_is_missing_one_line_each() -> None:
    from poptune.gpucheck.preflight import REQUIREMENTS, version_checks

    assert {(p, v) for p, v, _ in REQUIREMENTS} >= {("regex", None), ("scipy", "1.15")}
    lines = [c.line() for c in version_checks((("pytest", None, "tests"), ("pytest", "999.1", "the future"),
                                               ("no-such-package-poptune", None, "nothing")))]
    assert lines[0].startswith("PASS pytest: ")
    assert lines[1].startswith("FAIL pytest: ") and "< 999.1 (needed: the future)" in lines[1]
    assert lines[2] == "FAIL no-such-package-poptune: not installed (needed: nothing)"


def test_the_dry_run_runs_every_stage_with_the_hub_offline_before_transformers_is_imported(tmp_path: Path) -> None:
    # The dry run imports the whole check (torch, transformers, huggingface_hub): the hub's constants, read once
    # at their import, must see the offline switches the command set first.
    code = ("import sys; from poptune.cli import main; "
            "code = main(['gpu-check', '--dry-run', '--device', 'cpu', '--out', sys.argv[1]]); "
            "import huggingface_hub.constants as c, os; "
            "print(code, c.HF_HUB_OFFLINE, os.environ['HF_DATASETS_OFFLINE'])")
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, capture_output=True, text=True,
                         check=True, timeout=300)
    assert out.stdout.split()[-3:] == ["0", "True", "1"]
    _every_stage_ran_on_stand_ins(tmp_path, out.stdout)


def _every_stage_ran_on_stand_ins(out: Path, stdout: str) -> None:
    """The dry run ran every stage on stand-ins, each expecting the device's time its plan gives (one dry run,
    the test above's, serves both checks: a dry run takes about 25 s here)."""
    from poptune.gpucheck.plan import full_plan, stage_seconds

    data = json.loads((out / "gpu-check.json").read_text())
    plan = full_plan()
    assert data["dry_run"] and data["errors"] == {} and data["skipped"] == {}
    assert list(data["seconds"]) == [c.model for c in plan.cases] + (["scores"] if plan.scores else [])
    last = plan.cases[-1]  # its expected time is the device's (full-size build), not the stand-in's
    assert data["expected"][last.model] == round(stage_seconds(plan, last, first_import=False,
                                                               first_profile=False)["total"], 1) > 20
    assert {r["model"] for r in data["rows"]} == {c.model for c in plan.cases}
    assert "DRY llama-3.1: its code path ran on stand-ins" in stdout
    assert "DRY RUN on stand-in models" in (out / "gpu-check.md").read_text()


def test_the_commands_budget_default_is_the_checks(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        main(["gpu-check", "--help"])
    assert f"(default: {check.BUDGET_SECONDS:g})" in " ".join(capsys.readouterr().out.split())


def test_without_out_or_versions_it_is_one_line_and_exit_2(capsys: pytest.CaptureFixture) -> None:
    assert main(["gpu-check", "--dry-run"]) == 2
    assert capsys.readouterr().err.strip() == ("poptune gpu-check: error: `--out` is required (the folder of "
                                               "gpu-check.json and gpu-check.md), or pass --versions")


def test_busy_union_counts_overlaps_once() -> None:
    from poptune.gpucheck.profile import busy_union, launch_bound

    assert busy_union([(0, 2), (1, 3), (5, 6), (5.5, 5.7)]) == 4
    assert launch_bound({"kernel_ms": 1.0}, 4.0)["launch_bound"] is True
    assert launch_bound({"kernel_ms": 3.0}, 4.0) | {} == {"kernel_ms": 3.0, "busy": 0.75, "launch_bound": False}


def test_admission_counts_the_build_the_import_and_the_profiler(tmp_path: Path, monkeypatch) -> None:
    # Issue 47 (4): a stage whose rows fit in what is left, but not with its build and profiler passes, is not
    # started (it would overrun and lose what it measured).
    from poptune.gpucheck.plan import case_seconds, stage_seconds, tiny_plan

    plan = tiny_plan()
    first = plan.cases[0]
    parts = stage_seconds(plan, first, first_import=False, first_profile=True)
    assert parts["rows"] == case_seconds(plan, first) and parts["total"] > parts["rows"] + parts["profiler"] - 1e-9
    monkeypatch.setattr(check, "load_model", lambda *a, **k: (_ for _ in ()).throw(AssertionError("started")))
    check.run(tmp_path, tiny=True, device="cpu", budget=parts["rows"] + 0.5)
    data = json.loads((tmp_path / "gpu-check.json").read_text())
    assert data["skipped"][first.model].startswith("time budget spent") and first.model not in data["errors"]
    assert data["admitted"][first.model]["build"] > 0 and data["admitted"][first.model]["profiler"] >= 5


def test_the_report_is_written_after_every_row(tmp_path: Path, monkeypatch) -> None:
    from poptune.gpucheck.report import Report

    written: list[int] = []
    real = Report.write
    monkeypatch.setattr(Report, "write", lambda self: written.append(len(self.data["rows"])) or real(self))
    check.run(tmp_path, tiny=True, device="cpu")
    assert all(n in written for n in range(1, 7))  # a write as each of the 6 rows came, not only at stage ends


def test_nvml_preflight_failures_do_not_stop_the_timing(tmp_path: Path, monkeypatch, capsys) -> None:
    # Issue 47 (3): an energy counter NotSupported (a VM) or a UUID mismatch leaves NVML's figures empty, the rows
    # are still timed. (A fake preflight: there is no GPU here.)
    from poptune.gpucheck.preflight import Check

    fails = [Check("cuda", "PASS", "a fake GPU"), Check("nvml", "PASS", "matched"),
             Check("energy", "FAIL", "energy unavailable (NVMLError_NotSupported)", stops=False),
             Check("clocks", "FAIL", "clocks unreadable", stops=False)]
    monkeypatch.setattr(check, "preflight", lambda device, tiny: (fails, None))
    assert main(["gpu-check", "--tiny", "--device", "cpu", "--out", str(tmp_path)]) == 1  # FAIL lines, loud
    data = json.loads((tmp_path / "gpu-check.json").read_text())
    assert len(data["rows"]) == 6 and data["scores"]["status"] == "PASS"
    printed = capsys.readouterr().out
    assert "FAIL energy: energy unavailable (NVMLError_NotSupported) (timing went on without it)" in printed
    assert f"NOTE {check.NVML_NOTE}" in printed
    monkeypatch.setattr(check, "preflight", lambda device, tiny: ([Check("cuda", "FAIL", "no CUDA")], None))
    assert not check.run(tmp_path / "b", tiny=True, device="cpu").data["rows"]  # CUDA's failure still stops it


def test_the_same_command_keeps_the_stages_a_previous_run_finished(tmp_path: Path, monkeypatch) -> None:
    # Issue 47 (5): a rerun on the first run's report runs only what that run did not finish.
    check.run(tmp_path, tiny=True, device="cpu")
    data = json.loads((tmp_path / "gpu-check.json").read_text())
    data["errors"]["tiny-gemma3"] = "RuntimeError: broke"
    data["rows"] = [r for r in data["rows"] if r["model"] != "tiny-gemma3"]
    (tmp_path / "gpu-check.json").write_text(json.dumps(data))
    loaded = []
    real = check.load_model
    monkeypatch.setattr(check, "load_model", lambda name, **k: loaded.append(name) or real(name, **k))
    report = check.run(tmp_path, tiny=True, device="cpu")
    assert loaded == ["tiny-gemma3"] and report.data["kept"] == ["tiny-llama", "tiny-qwen3-vl", "scores"]
    assert [r["model"] for r in report.data["rows"]].count("tiny-gemma3") == 1 and len(report.data["rows"]) == 6
    assert report.data["errors"] == {} and "KEPT tiny-llama: measured by the previous run" in "\n".join(report.lines())


def _null(aa: tuple[float, float, float], decode: tuple[float, float, float], pairs: int = 6) -> dict:
    def fig(s, lo, hi):  # a table's row
        return {"speedup": s, "lo": lo, "hi": hi, "pairs": pairs}

    return {"model": "llama-3.1", "length": 2048, "aa": fig(*aa), "decode": fig(*decode)}


def test_null_checks_are_judged_by_their_intervals_not_their_point_estimates() -> None:
    from poptune.gpucheck.report import _null_lines, failures

    data = {"preflight": [], "dry_run": False, "rows": [], "scores": None, "errors": {}}
    # The first H200 run (2026-12-04): decode 1.0407 over 6 pairs, interval [0.9612, 1.1048] holding 1: noise.
    seen = _null((1.0045, 0.9921, 1.0090), (1.0407, 0.9612, 1.1048))
    assert failures({**data, "null_checks": seen}) == []
    assert [line.split(":")[0] for line in _null_lines(seen)] == ["NOTE decode"]
    # Identical work measured different: the whole interval outside 1 +- 3% (decode) or 2% (A/A).
    off = _null((1.031, 1.022, 1.040), (1.08, 1.05, 1.11))
    assert [line.split(":")[0] for line in failures({**data, "null_checks": off})] == ["FAIL A/A", "FAIL decode"]
    inside = _null((1.001, 0.995, 1.006), (1.004, 0.985, 1.02))
    assert _null_lines(inside) == []
