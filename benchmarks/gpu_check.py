"""The prepared GPU check: one command that tells whether poptune measures a GPU right, in <= 8 minutes.

Usage (from the repository root)::

    python benchmarks/gpu_check.py --out DIR           # one large GPU (an H200: about 4-6 minutes)
    python benchmarks/gpu_check.py --out DIR --tiny    # tiny models, seconds; on CPU the NVML parts say why not

It writes ``DIR/gpu-check.json`` (every record) and ``DIR/gpu-check.md`` (the summary), after each stage, and
prints the summary's status lines. Stages: preflight (CUDA, NVML matched by UUID, energy counter advancing,
clocks; the first failure stops the check), the A/A and decode null checks, the rows of each model (random
bf16 weights built on the GPU) with per-row telemetry, energy per prefill and one profiler pass, and the real
Gemma-3-270M's POP scores on the GPU against the CPU. Exit status 1 when any FAIL line was printed. The README
("The GPU check") explains every line.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from gpucheck.plan import Plan, full_plan, tiny_plan
from gpucheck.preflight import preflight
from gpucheck.report import Report, failures
from gpucheck.rows import measure_case, null_checks
from gpucheck.scores import compare_scores
from poptune import load_model
from poptune.device import resolve_device

#: The whole check's time budget: a stage that would start after it is skipped with that reason.
BUDGET_SECONDS = 450.0


def _stage(report: Report, name: str, work: Callable[[], None], deadline: float) -> None:
    """Runs one stage; a stage that breaks becomes a FAIL line and the check goes on with the next."""
    if time.monotonic() > deadline:
        report.data["skipped"][name] = "time budget spent"
        return
    start = time.monotonic()
    try:
        work()
    except Exception as e:  # a broken stage is a finding of the check, not the end of it
        report.data["errors"][name] = f"{type(e).__name__}: {str(e).strip()[:300]}"
    report.data["seconds"][name] = round(time.monotonic() - start, 1)
    report.write()
    print(f"[{time.strftime('%H:%M:%S')}] {name}: {report.data['seconds'][name]} s", flush=True)


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


def run(out: Path, *, tiny: bool, device: str | None, budget: float = BUDGET_SECONDS) -> Report:
    """The whole check; returns its report (already written to ``out``)."""
    plan = tiny_plan() if tiny else full_plan()
    dev = resolve_device(device) if device else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    report = Report(out, plan, str(dev))
    deadline = time.monotonic() + budget
    checks, report.data["hardware"] = preflight(dev, tiny=plan.tiny)
    report.data["preflight"] = [vars(c) for c in checks]
    report.write()
    if any(c.status == "FAIL" for c in checks):
        return report
    for index, case in enumerate(plan.cases):
        _stage(report, case.model, _model_stage(report, plan, index, dev), deadline)
    _stage(report, "scores", _scores_stage(report, plan, dev), deadline)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="folder for gpu-check.json and gpu-check.md")
    parser.add_argument("--tiny", action="store_true", help="tiny random models (seconds; runs on CPU)")
    parser.add_argument("--device", help="cuda, cuda:N or cpu (default: cuda where available, else cpu)")
    parser.add_argument("--budget", type=float, default=BUDGET_SECONDS,
                        help=f"seconds after which no new stage starts (default: {BUDGET_SECONDS:g})")
    args = parser.parse_args(argv)
    report = run(Path(args.out), tiny=args.tiny, device=args.device, budget=args.budget)
    print("\n".join(report.lines()), flush=True)
    return 1 if failures(report.data) else 0


if __name__ == "__main__":
    sys.exit(main())
