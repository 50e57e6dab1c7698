"""Issue 88 (item 4): baseline methods are named in their homes only (``poptune/baselines/``: a method's module and
the registry, :mod:`poptune.baselines.methods`), so that a new method is one module and one registry line.

Every module of the package outside ``poptune/baselines/`` is parsed (nothing is imported) and its string literals,
docstrings aside, are read: a literal that *is* a method's name (``"wanda"``, ``"shortgpt-gen"``: punctuation around
it aside) names the method where it should ask the registry (``method(name).own_ratio``, ``.label``, ``.amount``):
``if method == "wanda"`` is exactly what the test exists to catch. What remains is allowed one by one, with its reason.
"""

from __future__ import annotations

from pathlib import Path

from poptune.baselines.methods import BASELINES, METHODS, method
from tests import registry_scan

ROOT = Path(__file__).resolve().parents[2]
HOMES = ("poptune/baselines/",)

#: (module, literal) pairs that use a method's name for something else, and why.
ALLOWED: dict[tuple[str, str], str] = {
    ("poptune/models/vision.py", "width"): "an image's width, not the width-pruning baseline",
}

_STRIP = " /,.;:_`'\"()"


def violations(source: str) -> list[tuple[int, str]]:
    """``(line, literal)`` of every string literal of ``source`` that is a method's name, docstrings aside."""
    return registry_scan.literals(source, lambda value: value.strip(_STRIP) in METHODS)


def test_no_module_outside_the_registry_names_a_baseline():
    found = registry_scan.outside(HOMES, violations, ALLOWED)
    assert not found, ("baselines named outside poptune/baselines/ (ask poptune.baselines.methods.method(name)):\n"
                       + "\n".join(found))


def test_every_allowed_use_is_still_there():
    stale = registry_scan.stale(ALLOWED, violations)
    assert not stale, f"allowed uses no longer found (drop them from ALLOWED): {stale}"


def test_the_scan_catches_a_method_named_in_code():
    assert violations('if method == "wanda":\n    pass\n') == [(1, "wanda")]
    assert violations('x = "shortgpt-gen"\n') == [(1, "shortgpt-gen")]
    assert violations('def f():\n    """Wanda and SLEB, in prose."""\n') == []


def test_each_method_is_its_own_module_and_one_registry_line():
    modules = [type(m).__module__ for m in BASELINES]
    assert len(set(modules)) == len(BASELINES)  # one module per method
    assert all(method(m.name) is m for m in BASELINES)
    registry = (ROOT / "poptune/baselines/methods.py").read_text(encoding="utf-8")
    assert all(f"    {module.rsplit('.', 1)[1]}.METHOD,\n" in registry for module in modules)
