"""The test suite on an idle and on a loaded machine: wall time and verdict of each run (issue 50).

Runs the README's test command (``python -m pytest -n 2 --dist loadfile``, from the repository root) ``--idle``
times as it is, then ``--loaded`` times with ``--hogs`` CPU-bound processes running beside it (each one a busy
loop, as much CPU as the suite itself wants on a 2-core machine), and stops them after each run, whatever
happened. Prints one line per run as it ends and a Markdown table at the end; exits 1 if any run failed.

    .venv/bin/python benchmarks/loaded_suite.py                      # 1 idle run, 3 loaded runs, 2 hogs
    .venv/bin/python benchmarks/loaded_suite.py --idle 0 --loaded 1 -- tests/tune -x   # pytest's arguments after --

A suite whose verdicts depend on nothing but the code passes all of them; the loaded runs take longer. See also
``pytest --scramble-clock SEED`` (tests/conftest.py), which times every measurement on a scrambled clock.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The README's test command's arguments (two pytest-xdist workers, one file each at a time).
README_ARGS = ("-n", "2", "--dist", "loadfile")
#: A busy loop: one CPU-bound process, as a second job on a shared machine would be.
HOG = "while True:\n    pass\n"


@dataclass
class Run:
    """One run of the suite: its kind, exit code, wall time, pytest's last line, the load average around it."""

    kind: str
    code: int
    seconds: float
    summary: str
    load: str


def _hogs(count: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", HOG], stdin=subprocess.DEVNULL) for _ in range(count)]


def _stop(hogs: list[subprocess.Popen]) -> None:
    for proc in hogs:  # only the processes started here, by their handles
        proc.terminate()
    for proc in hogs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _load() -> str:
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:
        return "?"


def run_suite(kind: str, hogs: int, pytest_args: list[str], log: Path | None) -> Run:
    """One run of ``python -m pytest`` with ``hogs`` busy loops beside it (stopped before this returns)."""
    started_hogs = _hogs(hogs)
    try:
        before, began = _load(), time.monotonic()
        done = subprocess.run([sys.executable, "-m", "pytest", *pytest_args], cwd=ROOT, capture_output=True, text=True,
                              env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})
        seconds = time.monotonic() - began
        load = f"{before} -> {_load()}"
    finally:
        _stop(started_hogs)
    if log is not None:
        log.write_text(done.stdout + done.stderr)
    lines = [line.strip("= ") for line in done.stdout.splitlines() if re.search(r"\b(passed|failed|error)", line)]
    return Run(kind, done.returncode, seconds, lines[-1] if lines else done.stderr.strip()[-200:], load)


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {seconds % 60:02.0f} s"


def table(runs: list[Run]) -> str:
    rows = ["| run | exit | wall time | pytest | load (1 min) |", "|---|---|---|---|---|"]
    rows += [f"| {r.kind} | {r.code} | {_minutes(r.seconds)} | {r.summary} | {r.load} |" for r in runs]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idle", type=int, default=1, help="runs with nothing beside the suite (default 1)")
    parser.add_argument("--loaded", type=int, default=3, help="runs with the hogs beside it (default 3)")
    parser.add_argument("--hogs", type=int, default=2, help="CPU-bound processes beside a loaded run (default 2)")
    parser.add_argument("--logs", type=Path, help="a folder for each run's full pytest output")
    parser.add_argument("pytest_args", nargs="*", default=list(README_ARGS),
                        help="pytest's arguments, after -- (default: the README's, -n 2 --dist loadfile)")
    args = parser.parse_args(argv)
    if min(args.idle, args.loaded, args.hogs) < 0 or args.idle + args.loaded == 0:
        parser.error("--idle, --loaded and --hogs must be >= 0, and at least one run asked for")
    if args.logs is not None:
        args.logs.mkdir(parents=True, exist_ok=True)
    plan = [("idle", 0)] * args.idle + [(f"loaded ({args.hogs} hogs)", args.hogs)] * args.loaded
    runs = []
    for k, (kind, hogs) in enumerate(plan, 1):
        log = args.logs / f"run{k}-{kind.split()[0]}.log" if args.logs is not None else None
        runs.append(run_suite(kind, hogs, args.pytest_args, log))
        r = runs[-1]
        print(f"[{k}/{len(plan)}] {kind}: exit {r.code} in {_minutes(r.seconds)}: {r.summary}", flush=True)
    print()
    print(table(runs))
    return 0 if all(r.code == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
