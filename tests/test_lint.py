"""The tree passes its lint and type checks: ruff and mypy, as configured in pyproject.toml (issue 60).

They run here so that the README's one test command (and so ``.ci/run``) runs them too. Both come with the
``test`` extra; without them the test fails, it does not skip. mypy keeps its cache in poptune's cache folder
(beside the embedded model, :func:`poptune.cache.cache_dir`), not in the checkout: its first run on a machine reads
torch's types (about a minute on the 2-core CPU), later ones -- a fresh clone's too -- take seconds. mypy checks
each cached module against its source's hash, so a changed file is always read again.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _check(tool: str, *args: str) -> None:
    if importlib.util.find_spec(tool) is None:
        pytest.fail(f"{tool} is not installed: install the test extra (.venv/bin/pip install -e '.[test]')")
    done = subprocess.run([sys.executable, "-m", tool, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, f"`{tool} {' '.join(args)}` failed:\n{done.stdout}{done.stderr}"


def test_ruff_finds_nothing() -> None:
    _check("ruff", "check", "poptune", "tests", "benchmarks")


def test_mypy_finds_nothing() -> None:
    from poptune.cache import cache_dir

    # what it checks and how strictly: [tool.mypy] in pyproject.toml
    _check("mypy", "--cache-dir", str(cache_dir() / "mypy"))
