"""The public API: what ``poptune`` and ``poptune.evaluate`` export, imported on first use only."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

import poptune
import poptune.evaluate

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "optuna", "transformers", "lm_eval", "numpy")


@pytest.mark.parametrize("module", ["poptune", "poptune.evaluate"])
def test_importing_the_package_loads_nothing_heavy(module):
    code = f"import sys, {module}; print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": ""}).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("package", [poptune, poptune.evaluate])
def test_every_exported_name_resolves_to_its_defining_module(package):
    for name in package.__all__:
        value = getattr(package, name)
        assert value is not None and name in dir(package)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = package.nope


@pytest.mark.parametrize("package", ["poptune", "poptune.evaluate"])
def test_type_checkers_see_the_same_names(package):
    module = importlib.import_module(package)
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    names = {a.asname or a.name for n in block.body if isinstance(n, ast.ImportFrom) for a in n.names}
    assert names == set(module.__all__) - {"__version__"}


def test_the_main_entry_points_are_exported():
    from poptune.evaluate.suite import run_eval
    from poptune.measure.bench import run_bench
    from poptune.tune.study import StudySpec, run_study

    assert (poptune.run_bench, poptune.run_eval, poptune.run_study, poptune.StudySpec) == (
        run_bench, run_eval, run_study, StudySpec)
    assert poptune.evaluate.run_eval is run_eval


def test_submodules_still_import_through_the_root():
    from poptune import progress, store

    assert store.__name__ == "poptune.store" and progress.__name__ == "poptune.progress"


def test_version_comes_from_the_package_metadata():
    assert poptune.__version__ == importlib.metadata.version("poptune")
