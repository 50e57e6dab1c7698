"""Issue 88 (item 6): every subpackage says what it offers in ``__all__``. Packages that import none of their modules
(``tune``, ``problem``, ``reports``, ``kv``, ``kvfit``, ``objectives``, ``gpucheck``,
``serving``, ``testing``) list their modules: ``__all__``
names exactly the modules present, so a module added or removed is listed or dropped with it."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "poptune"

MODULE_LISTS = ("tune", "problem", "reports", "kv", "kvfit", "objectives", "gpucheck", "serving", "testing")


def test_every_subpackage_has_an_all():
    missing = [p.parent.name for p in sorted(ROOT.glob("*/__init__.py"))
               if "__all__" not in p.read_text(encoding="utf-8")]
    assert not missing, f"subpackages without __all__: {missing}"


@pytest.mark.parametrize("name", MODULE_LISTS)
def test_a_package_of_modules_lists_exactly_its_modules_and_imports_none(name):
    before = set(sys.modules)
    package = importlib.import_module(f"poptune.{name}")
    modules = sorted(p.stem for p in (ROOT / name).glob("*.py") if p.name != "__init__.py")
    assert sorted(package.__all__) == modules
    loaded = {m for m in set(sys.modules) - before if m.startswith(f"poptune.{name}.")}
    assert not loaded or f"poptune.{name}" in before  # importing the package imported none of its modules
