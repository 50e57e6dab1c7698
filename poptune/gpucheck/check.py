"""The prepared GPU check: one command that tells whether poptune measures a GPU right, in one device call.

``poptune gpu-check`` (:mod:`poptune.cli.gpucheck`) calls :func:`run` and prints its summary's status lines.
It writes ``DIR/gpu-check.json`` (every record) and ``DIR/gpu-check.md`` (the summary), after each stage. Stages:
preflight (package versions; CUDA, NVML matched by UUID, energy counter advancing, clocks; the first failure
stops the check), the A/A and decode null checks, the rows of each model (random bf16 weights built on the GPU)
with per-row telemetry, energy per prefill and one profiler pass, and the real Gemma-3-270M's POP scores on the
GPU against the CPU. A stage starts only when the time its plan expects
(:func:`poptune.gpucheck.plan.case_seconds`) fits in what is left of the budget; otherwise it is skipped with
that reason. docs/gpu-check.md explains every line.

The command sets ``HF_HUB_OFFLINE`` and ``HF_DATASETS_OFFLINE`` before it imports this module (transformers and
huggingface_hub read them once, at import): the device has no network, and a hub look-up there waits for its
time-out instead of failing at once.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from pathlib import Path

import torch

from poptune.device import resolve_device
from poptune.gpucheck.plan import Plan, case_seconds, full_plan, tiny_plan
from poptune.gpucheck.preflight import preflight, version_checks
from poptune.gpucheck.report import Report
from poptune.gpucheck.rows import measure_case, null_checks
from poptune.gpucheck.scores import compare_scores
from poptune.models import load_model

__all__ = ["BUDGET_SECONDS", "SCORES_SECONDS", "run"]

#: The whole check's time budget (s): a stage whose expected time does not fit in what is left is skipped
#: (``poptune gpu-check --budget``'s help names it too; a test holds them equal).
BUDGET_SECONDS = 330.0
#: What the plan expects of the scores stage (s): not estimated. Where the real Gemma-3-270M is not installed (the
#: lent device) the stage says SKIP at once; where it is, it scores 50 short items on the GPU and on the CPU.
SCORES_SECONDS = 0.0


def _stage(report: Report, name: str, work: Callable[[], None], deadline: float, expected: float,
           dry_run: bool = False) -> None:
    """Runs one stage when its expected seconds fit before ``deadline``; a stage that breaks becomes a FAIL
    line and the check goes on with the next."""
    report.data["expected"][name] = round(expected, 1)
    left = deadline - time.monotonic()
    if dry_run or expected > left:
        why = "dry run: no device work" if dry_run else "time budget spent"
        report.data["skipped"][name] = f"{why} (expected {expected:.0f} s, {max(left, 0):.0f} s of the budget left)"
        report.write()
        return
    start = time.monotonic()
    try:
        work()
    except Exception as e:  # a broken stage is a finding of the check, not the end of it
        report.data["errors"][name] = f"{type(e).__name__}: {str(e).strip()[:300]}"
    report.data["seconds"][name] = round(time.monotonic() - start, 1)
    report.write()
    print(f"[{time.strftime('%H:%M:%S')}] {name}: {report.data['seconds'][name]} s (expected {expected:.0f} s)",
          flush=True)


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _model_stage(report: Report, plan: Plan, index: int, device: torch.device) -> Callable[[], None]:
    case = plan.cases[index]

    def work() -> None:
        model, tokenizer = load_model(case.model, device=device, weights="random")
        try:
            if case.model == plan.null_case.model and report.data["null_checks"] is None:
                report.data["null_checks"] = null_checks(model, tokenizer, plan)
                report.data["benches"].append(report.data["null_checks"].pop("bench"))
            rows, benches = measure_case(model, tokenizer, case, plan)
            report.data["rows"] += rows
            report.data["benches"] += benches
        finally:
            del model
            _free(device)

    return work


def _scores_stage(report: Report, plan: Plan, device: torch.device) -> Callable[[], None]:
    def work() -> None:
        report.data["scores"] = compare_scores(plan, device)
        _free(device)

    return work


def run(out: Path, *, tiny: bool, device: str | None, budget: float = BUDGET_SECONDS,
        dry_run: bool = False) -> Report:
    """The whole check; returns its report (already written to ``out``). ``dry_run``: no device work, every
    stage skipped with the time the plan expects of it."""
    plan = tiny_plan() if tiny else full_plan()
    dev = resolve_device(device) if device else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    report = Report(out, plan, str(dev))
    deadline = time.monotonic() + budget
    versions = version_checks()
    checks, report.data["hardware"] = ([], None) if dry_run else preflight(dev, tiny=plan.tiny)
    report.data["preflight"] = [vars(c) for c in versions + checks]
    report.write()
    if any(c.status == "FAIL" for c in versions + checks):
        return report
    for index, case in enumerate(plan.cases):
        _stage(report, case.model, _model_stage(report, plan, index, dev), deadline, case_seconds(plan, case), dry_run)
    _stage(report, "scores", _scores_stage(report, plan, dev), deadline, SCORES_SECONDS, dry_run)
    return report
