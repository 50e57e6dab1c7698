"""Several `poptune study` workers on one study, with faults (tests/harness/distributed_study.py, scaled down).

Each run must end with exactly its budget of measured configurations, no configuration measured twice, every
completed trial's attributes present and every worker exiting 0.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.distributed

ROOT = Path(__file__).resolve().parents[2]


def _run(tmp_path, *args):
    out = tmp_path / "figures.json"
    # The harness fails by itself if no configuration is measured for 900 s (its --stall); the wall limit here is
    # only the backstop of a harness that hangs, far above a run on a loaded machine.
    done = subprocess.run([sys.executable, "-m", "tests.harness.distributed_study", *args, "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=3600)
    assert out.exists(), done.stdout + done.stderr
    figures = json.loads(out.read_text())
    budget = int(args[args.index("--trials") + 1])
    assert figures["measured"] == budget, figures  # answers from storage use no budget
    assert figures["measured_twice"] == [] and figures["incomplete_attributes"] == [], figures
    assert figures["exit_codes"] == [0] * figures["workers"], figures["failed_worker_logs"]
    assert figures["running"] == 0
    assert done.returncode == 0
    return figures


# Faults are counted in measured configurations, not seconds: a kill every 4 s gave one kill on an idle machine
# (the study filled in 12 s) and, on a loaded one, killed each worker again before it had started, so the study
# never filled. A fault fires after every measured configuration: it takes a look that sees the first and another
# that sees more before the study is full, so 8 configurations with at most 3 new at one look (the harness looks
# 4 times a second; a fault also stalls the workers) give 2 faults or more. After every 2, an idle machine's
# workers once went from 4 to 8 between two looks: 1 restart.


def test_postgres_workers_killed_again_and_again(tmp_path, postgres_url):
    figures = _run(tmp_path, "--storage", "postgres", "--url", postgres_url, "--workers", "3", "--trials", "8",
                   "--kill-after", "1")
    assert figures["kills"] >= 2


def test_journal_workers_killed_again_and_again(tmp_path):
    figures = _run(tmp_path, "--storage", "journal", "--workers", "3", "--trials", "8", "--kill-after", "1")
    assert figures["kills"] >= 2


def test_postgres_restarted_under_the_workers(tmp_path, postgres):  # the fixture: skip where no server starts
    figures = _run(tmp_path, "--storage", "postgres", "--workers", "3", "--trials", "8", "--restart-db-after", "1")
    assert figures["db_restarts"] >= 2
