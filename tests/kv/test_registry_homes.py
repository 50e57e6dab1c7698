"""Issue 48's "done when": K/V sources are named in their homes only (``poptune/kv/``), so that a new source is
one module and one registry line.

Every module of the package outside ``poptune/kv/`` is parsed (nothing is imported) and its string literals,
docstrings aside, are read: a literal that *is* a source's name (``"calibrated"``, ``"/anchor"``: punctuation
around it aside), that spells a source's label (``"calibrated K/V"``) or holds its file tag (``"-kvcal"``) names
the source where it should ask :mod:`poptune.kv.registry` (``source(name).label``, ``is_default(kv)``, ...):
``if config.kv == "calibrated"`` is exactly what the test exists to catch. What remains is allowed one by one,
each with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

from poptune.kv import registry

ROOT = Path(__file__).resolve().parents[2]
HOMES = ("poptune/kv/",)

#: (module, literal) pairs that use a source's name for something else, and why.
ALLOWED: dict[tuple[str, str], str] = {
    ("poptune/kvfit/fit.py", "own"): "SINK_MODES: sink tokens fitted through the layer's own projections, "
                                     "a fitting option of the calibrated source, not a K/V source's name",
}

_STRIP = " /,.;:-_`'\"()"


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _names(value: str) -> list[str]:
    """The sources ``value`` names: as itself, in a label, or by a file tag."""
    named = [s.name for s in registry.SOURCES if value.strip(_STRIP) == s.name]
    named += [s.name for s in registry.SOURCES if s.label and s.label in value]
    named += [s.name for s in registry.SOURCES if s.tag and s.tag in value]
    return sorted(set(named))


def violations(source: str) -> list[tuple[int, str]]:
    """``(line, literal)`` of every string literal of ``source`` naming a K/V source, docstrings aside."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
            and _names(node.value)]


def test_no_module_outside_the_registry_names_a_kv_source():
    found = []
    for path in sorted((ROOT / "poptune").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith(HOMES):
            continue
        for line, value in violations(path.read_text(encoding="utf-8")):
            if (relative, value) not in ALLOWED:
                found.append(f"{relative}:{line}: {value!r}")
    assert not found, ("K/V sources named outside poptune/kv/ (ask poptune.kv.registry: source(name).label, "
                       "is_default, NAMES, DEFAULT, distinct_at):\n" + "\n".join(found))


def test_every_allowed_use_is_still_there():
    stale = [key for key in ALLOWED
             if key[1] not in [v for _, v in violations((ROOT / key[0]).read_text(encoding="utf-8"))]]
    assert not stale, f"allowed uses no longer found (drop them from ALLOWED): {stale}"


def test_the_scan_catches_a_source_named_in_code():
    assert violations('if config.kv == "calibrated":\n    pass\n') == [(1, "calibrated")]
    assert sorted(v for _, v in violations('label = f"{a}/anchor" if kv != "own" else ", calibrated K/V"\n')) == [
        ", calibrated K/V", "/anchor", "own"]
    assert violations('tag = "pop-skip6-kvcal"\n') == [(1, "pop-skip6-kvcal")]
    assert violations('def f():\n    """Calibrated K/V, anchor K/V and own K/V, in prose."""\n') == []
    assert violations('x = "the layers\' own projections"\n') == []
