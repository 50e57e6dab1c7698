"""The prepared GPU check: one command that tells whether poptune measures a GPU right, in one device call.

``poptune gpu-check`` (:mod:`poptune.cli.gpucheck`) calls :func:`run` and prints its summary's status lines.
It writes ``DIR/gpu-check.json`` (every record) and ``DIR/gpu-check.md`` (the summary) after every row and
stage. Stages: preflight (package versions and CUDA, whose failure stops the check; NVML matched by UUID, the
energy counter advancing and clocks readable, whose failure does not: timing goes on without those figures), the
A/A and decode null checks, the rows of each model (random bf16 weights built on the GPU) with per-row
telemetry, energy per prefill and one profiler pass, and the real Gemma-3-270M's POP scores on the GPU against
the CPU.

**Admission.** A stage starts only when what it is expected to take fits in what is left of the budget:
its rows (:func:`poptune.gpucheck.plan.case_seconds`), its model build, the first import of transformers where
this stage makes it, and its profiler passes (:func:`poptune.gpucheck.plan.stage_seconds`); otherwise it is
skipped with that reason. **Resuming.** Run again on the same folder, the check keeps the stages a previous run
there finished and runs the others (:meth:`poptune.gpucheck.report.Report.resume`): a second, short device call
finishes what the first could not. **Dry run**: every stage's code path on the CPU with stand-in models
(:mod:`poptune.gpucheck.dryrun`). docs/gpu-check.md explains every line.

The command sets ``HF_HUB_OFFLINE`` and ``HF_DATASETS_OFFLINE`` before it imports this module (transformers and
huggingface_hub read them once, at import): the device has no network, and a hub look-up there waits for its
time-out instead of failing at once.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch

from poptune.device import resolve_device
from poptune.gpucheck.dryrun import dry_plan, stand_ins
from poptune.gpucheck.plan import Plan, full_plan, stage_seconds, tiny_plan
from poptune.gpucheck.preflight import preflight, version_checks
from poptune.gpucheck.report import Report
from poptune.gpucheck.rows import aa_checks, measure_case, null_checks, row_key
from poptune.gpucheck.scores import compare_scores
from poptune.measure.provenance import git_commit
from poptune.models import load_model, load_tokenizer

__all__ = ["BUDGET_SECONDS", "SCORES_SECONDS", "TimeLimit", "run"]

#: The whole check's time budget (s): a stage whose expected time does not fit in what is left is skipped
#: (``poptune gpu-check --budget``'s help names it too; a test holds them equal).
BUDGET_SECONDS = 330.0
#: What the plan expects of the scores stage (s): not estimated. Where the real Gemma-3-270M is not installed (the
#: lent device) the stage says SKIP at once; where it is, it scores 50 short items on the GPU and on the CPU.
SCORES_SECONDS = 0.0
#: The note said where an NVML preflight line failed.
NVML_NOTE = ("an NVML preflight line failed: timing goes on; the energy, power, clock and temperature figures "
             "are empty where NVML could not give them")


class TimeLimit(BaseException):  # not an Exception: a stage's ``except Exception`` lets it through
    """The outer time limit's SIGTERM (the device script's ``timeout``): the check stops where it is."""


def _on_term(signum: int, frame: object) -> None:
    raise TimeLimit(f"signal {signum}")


def _stage(report: Report, name: str, work: Callable[[], None], left: float, expected: dict[str, float],
           admit: bool = True) -> bool:
    """Runs one stage when its admission seconds (``admit``: the estimate with its margin, else ``total``) fit in
    ``left`` (or ``admit`` is False: a dry run); a stage that breaks becomes a FAIL line and the check goes on with
    the next. Cut by the time limit, the stage keeps the rows it wrote and :class:`TimeLimit` goes on up."""
    needed = expected.get("admit", expected["total"])
    report.data["expected"][name] = round(expected["total"], 1)
    report.data["admitted"][name] = {**{k: round(v, 1) for k, v in expected.items()}, "left": round(left, 1)}
    if admit and needed > left:
        report.data["skipped"][name] = (f"time budget spent (expected {expected['total']:.0f} s, admitted at "
                                        f"{needed:.0f} s, {max(left, 0):.0f} s of the budget left)")
        report.write()
        return False
    start = time.monotonic()
    try:
        work()
    except TimeLimit:
        rows = sum(r["model"] == name for r in report.data["rows"])
        report.data["errors"][name] = f"cut by the time limit after {rows} rows (kept: a rerun measures the rest)"
        report.data["seconds"][name] = round(time.monotonic() - start, 1)
        report.write()
        raise
    except Exception as e:  # noqa: BLE001 -- a broken stage is a finding of the check, not the end of it
        report.data["errors"][name] = f"{type(e).__name__}: {str(e).strip()[:300]}"
    report.data["seconds"][name] = round(time.monotonic() - start, 1)
    report.write()
    print(f"[{time.strftime('%H:%M:%S')}] {name}: {report.data['seconds'][name]} s (expected "
          f"{expected['total']:.0f} s)", flush=True)
    return True


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _model_stage(report: Report, plan: Plan, index: int, device: torch.device,
                 spare: Callable[[], float] = lambda: float("inf")) -> Callable[[], None]:
    """Stage ``index``: its model built, the null checks where it is the null case's, its rows; ``spare()``: the
    seconds the later stages do not need (what re-measuring a wide row may take)."""
    case = plan.cases[index]

    def work() -> None:
        model, tokenizer = load_model(case.model, device=device, weights="random")
        try:
            if case.model == plan.null_case.model and report.data["null_checks"] is None:
                checks = null_checks(model, tokenizer, plan)
                report.data["null_checks"] = checks
                report.data["benches"].append(checks.pop("bench"))
                report.write()
            if case.model == plan.null_case.model and not report.data["aa_more"]:
                for extra in aa_checks(model, tokenizer, plan):  # A/A at the null case's further lengths
                    report.data["benches"].append(extra.pop("bench"))
                    report.data["aa_more"].append(extra)
                report.write()
            done = {row_key(r) for r in report.data["rows"] if r["model"] == case.model}  # a cut run's (kept)
            measure_case(model, tokenizer, case, plan, report.add_row, done=done, spare=spare)
        finally:
            del model
            _free(device)

    return work


def _scores_stage(report: Report, plan: Plan, device: torch.device, real_model: str) -> Callable[[], None]:
    def work() -> None:
        if plan.scores_model != real_model:  # a dry run: the real weights looked up (nothing built), then stand-ins
            report.data["notes"].append(f"dry run: {real_model}'s tokenizer "
                                        f"{'found' if load_tokenizer(real_model) is not None else 'not built here'}")
        report.data["scores"] = compare_scores(plan, device)
        _free(device)

    return work


def _preflight(report: Report, plan: Plan, device: torch.device, dry_run: bool) -> bool:
    """Writes the preflight lines; returns whether the check may go on (no version or CUDA failure)."""
    versions = version_checks()
    checks, hardware = ([], None) if dry_run else preflight(device, tiny=plan.tiny)
    report.data["hardware"] = hardware
    report.data["preflight"] = [vars(c) for c in versions + checks]
    if any(c.status == "FAIL" and not c.stops for c in checks):
        report.data["notes"].append(NVML_NOTE)
    report.write()
    return not any(c.status == "FAIL" and c.stops for c in versions + checks)


def run(out: Path, *, tiny: bool, device: str | None, budget: float = BUDGET_SECONDS,
        dry_run: bool = False, deadline: float | None = None) -> Report:
    """The whole check; returns its report (already written to ``out``). Resumes a previous run's report in
    ``out`` (its finished stages kept). ``dry_run``: every stage's code path on the CPU with stand-in models
    (:mod:`poptune.gpucheck.dryrun`), nothing resumed, every stage run whatever the budget. ``deadline``: the
    wall-clock time (``time.time()``) all stages must end by, set by the caller from its own start (the device
    script's); without it, ``budget`` seconds from now. A SIGTERM (the outer time limit) stops the check with
    the rows it measured written."""
    end = deadline if deadline is not None else time.time() + budget
    previous = signal.signal(signal.SIGTERM, _on_term)
    try:
        return _run(out, tiny=tiny, device=device, end=end, dry_run=dry_run)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run(out: Path, *, tiny: bool, device: str | None, end: float, dry_run: bool) -> Report:
    plan = tiny_plan() if tiny else full_plan()
    if dry_run:
        dev = torch.device("cpu")
    else:
        dev = resolve_device(device) if device else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    commit = os.environ.get("POPTUNE_COMMIT") or git_commit()  # the device script passes the clean commit
    report = Report(out, plan, str(dev), commit=commit) if dry_run else Report.resume(out, plan, str(dev), commit)
    report.data["dry_run"] = dry_run
    if not _preflight(report, plan, dev, dry_run):
        return report
    report.keep_card(report.data["hardware"])  # rows of another card are measured again
    work = dry_plan(plan) if dry_run else plan
    within = stand_ins if dry_run else contextlib.nullcontext
    profiled = False
    try:
        for index, case in enumerate(plan.cases):
            if case.model in report.data["kept"]:
                continue
            expected = stage_seconds(plan, case, first_import="transformers" not in sys.modules,
                                     first_profile=not profiled)  # the device's figures, outside the stand-ins
            later = sum(stage_seconds(plan, c, first_import=False, first_profile=False)["admit"]
                        for c in plan.cases[index + 1:] if c.model not in report.data["kept"])
            stage = _model_stage(report, work, index, dev, spare=partial(_spare, end, later))
            ran = _stage(report, case.model, _inside(within, stage), end - time.time(), expected, admit=not dry_run)
            profiled = profiled or ran
        if plan.scores and "scores" not in report.data["kept"]:
            _stage(report, "scores", _inside(within, _scores_stage(report, work, dev, plan.scores_model)),
                   end - time.time(), {"total": SCORES_SECONDS}, admit=not dry_run)
    except TimeLimit:
        report.data["notes"].append("the outer time limit stopped the check: the rows measured are kept")
        report.write()
    return report


def _spare(end: float, later: float) -> float:
    """Seconds to the deadline ``end`` that the later stages' admission (``later``) does not need."""
    return end - time.time() - later


def _inside(context: Callable[[], contextlib.AbstractContextManager], work: Callable[[], None]) -> Callable[[], None]:
    def run_inside() -> None:
        with context():
            work()

    return run_inside
