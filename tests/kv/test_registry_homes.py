"""Issue 48's "done when": K/V sources are named in their homes only (``poptune/kv/``), so that a new source is
one module and one registry line.

Every module of the package outside ``poptune/kv/`` is parsed (nothing is imported) and its string literals,
docstrings aside, are read: a literal that *is* a source's name (``"calibrated"``, ``"/anchor"``: punctuation
around it aside), that spells a source's label (``"calibrated K/V"``) or holds its file tag (``"-kvcal"``) names
the source where it should ask :mod:`poptune.kv.registry` (``source(name).label``, ``is_default(kv)``, ...):
``if config.kv == "calibrated"`` is exactly what the test exists to catch. What remains is allowed one by one,
each with its reason.

Issue 60 (item 2) adds the sources' *behaviour*: outside ``poptune/kv/`` no module imports a source's own modules
(the registered sources' modules and what only they import, e.g. the anchor's compact cache): the engine, the
measurements and the command line reach a source through the contract (:mod:`poptune.kv.source`) and the registry
only. Nor does any module outside keep its own copy of the registry's list (``KV_SOURCES = registry.NAMES``): the
names have one home.
"""

from __future__ import annotations

import ast
from pathlib import Path

from poptune.kv import registry
from poptune.kv.source import KVSource
from tests import registry_scan

ROOT = Path(__file__).resolve().parents[2]
HOMES = ("poptune/kv/",)

#: (module, literal) pairs that use a source's name for something else, and why.
ALLOWED: dict[tuple[str, str], str] = {
    ("poptune/kvfit/fit.py", "own"): "SINK_MODES: sink tokens fitted through the layer's own projections, "
                                     "a fitting option of the calibrated source, not a K/V source's name",
}

_STRIP = " /,.;:-_`'\"()"


def _names(value: str) -> list[str]:
    """The sources ``value`` names: as itself, in a label, or by a file tag."""
    named = [s.name for s in registry.SOURCES if value.strip(_STRIP) == s.name]
    named += [s.name for s in registry.SOURCES if s.label and s.label in value]
    named += [s.name for s in registry.SOURCES if s.tag and s.tag in value]
    return sorted(set(named))


def violations(source: str) -> list[tuple[int, str]]:
    """``(line, literal)`` of every string literal of ``source`` naming a K/V source, docstrings aside."""
    return registry_scan.literals(source, _names)


def test_no_module_outside_the_registry_names_a_kv_source():
    found = registry_scan.outside(HOMES, violations, ALLOWED)
    assert not found, ("K/V sources named outside poptune/kv/ (ask poptune.kv.registry: source(name).label, "
                       "is_default, NAMES, DEFAULT, distinct_at):\n" + "\n".join(found))


def test_every_allowed_use_is_still_there():
    stale = registry_scan.stale(ALLOWED, violations)
    assert not stale, f"allowed uses no longer found (drop them from ALLOWED): {stale}"


def test_the_scan_catches_a_source_named_in_code():
    assert violations('if config.kv == "calibrated":\n    pass\n') == [(1, "calibrated")]
    assert sorted(v for _, v in violations('label = f"{a}/anchor" if kv != "own" else ", calibrated K/V"\n')) == [
        ", calibrated K/V", "/anchor", "own"]
    assert violations('tag = "pop-skip6-kvcal"\n') == [(1, "pop-skip6-kvcal")]
    assert violations('def f():\n    """Calibrated K/V, anchor K/V and own K/V, in prose."""\n') == []
    assert violations('x = "the layers\' own projections"\n') == []


# --------------------------------------------------------------------------------------------------------------
# Behaviour: a source's modules imported only in poptune/kv/; the registry's list copied nowhere

#: The modules of poptune/kv/ anyone may import: the contract, the registry, and what every source shares.
SHARED = {"poptune.kv", "poptune.kv.source", "poptune.kv.registry", "poptune.kv.project", "poptune.kv.maps"}

#: (importing module's prefix, source module) pairs allowed, and why.
ALLOWED_IMPORTS: dict[tuple[str, str], str] = {
    ("poptune/kvfit/", "poptune.kv.calibrated"): "the calibrated source's fitting and preparation, a floor up because "
                                                 "fitting runs the engine (docs/architecture.md: kvfit)",
}


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _source_modules() -> set[str]:
    """Every module of poptune/kv/ but the shared ones: the sources' own (each registered source's among them)."""
    found = {_module(p) for p in (ROOT / "poptune" / "kv").glob("*.py")} - SHARED
    assert {type(s).__module__ for s in registry.SOURCES} <= found, "a source's module is among the shared ones"
    return found


def _package(path: Path) -> str:
    """The package relative imports of ``path`` start from."""
    module = _module(path)
    return module if path.name == "__init__.py" else module.rsplit(".", 1)[0]


def imported(source: str, package: str) -> list[tuple[int, str]]:
    """``(line, module)`` of every import of a ``poptune.kv`` module in ``source`` (code of a module of ``package``),
    at any depth (lazy imports, ``TYPE_CHECKING``); ``from poptune.kv import anchor`` counts as
    ``poptune.kv.anchor``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            found += [(node.lineno, base), *((node.lineno, f"{base}.{a.name}") for a in node.names)]
    return [(line, name) for line, name in found if name.startswith("poptune.kv.") or name == "poptune.kv"]


def test_no_module_outside_the_kv_floor_imports_a_sources_own_module():
    own = _source_modules()
    found = []
    for path in sorted((ROOT / "poptune").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith(HOMES):
            continue
        for line, name in imported(path.read_text(encoding="utf-8"), _package(path)):
            if name in own and not any(relative.startswith(prefix) and name == target
                                       for prefix, target in ALLOWED_IMPORTS):
                found.append(f"{relative}:{line}: imports {name}")
    assert not found, ("a K/V source's behaviour outside poptune/kv/ (reach it through poptune.kv.source's contract "
                       "and poptune.kv.registry):\n" + "\n".join(found))


def _registry_aliases(source: str) -> list[tuple[int, str]]:
    """Module-level assignments of ``source`` whose value reads the registry's lists (``NAMES``, ``SOURCES``)."""
    tree = ast.parse(source)
    modules, names = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module == "kv" or (node.module or "").endswith(".kv")):
            modules |= {a.asname or a.name for a in node.names if a.name == "registry"}
        if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("kv.registry"):
            names |= {a.asname or a.name for a in node.names if a.name in ("NAMES", "SOURCES")}
    found = []
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            for part in ast.walk(node.value):
                if (isinstance(part, ast.Attribute) and part.attr in ("NAMES", "SOURCES")
                        and isinstance(part.value, ast.Name) and part.value.id in modules) or (
                        isinstance(part, ast.Name) and part.id in names):
                    found.append((node.lineno, ast.unparse(node)))
                    break
    return found


def test_no_module_outside_the_registry_copies_its_list_of_sources():
    found = [f"{path.relative_to(ROOT).as_posix()}:{line}: {text}"
             for path in sorted((ROOT / "poptune").rglob("*.py"))
             if not path.relative_to(ROOT).as_posix().startswith(HOMES)
             for line, text in _registry_aliases(path.read_text(encoding="utf-8"))]
    assert not found, "aliases of the registry's list (read kv_registry.NAMES where it is needed):\n" + "\n".join(found)


def test_the_behaviour_scans_catch_what_they_exist_for():
    assert imported("from poptune.kv.compact import CompactLayer\n", "poptune.engine") == [
        (1, "poptune.kv.compact"), (1, "poptune.kv.compact.CompactLayer")]
    assert (1, "poptune.kv.anchor") in imported("from ..kv import anchor\n", "poptune.engine")
    assert (1, "poptune.kv.compact") in imported("from ...kv.compact import compact_mask\n", "poptune.engine.sub")
    assert (2, "poptune.kv.calibrated") in imported("def f():\n    from poptune.kv import calibrated\n", "poptune")
    assert "poptune.kv.compact" in _source_modules() and "poptune.kv.source" not in _source_modules()
    assert [line for line, _ in _registry_aliases(
        "from ..kv import registry\nKV_SOURCES: tuple[str, ...] = registry.NAMES\n")] == [2]
    assert [line for line, _ in _registry_aliases(
        "from poptune.kv.registry import NAMES\nSOURCES = tuple(NAMES)\n")] == [2]
    assert _registry_aliases("from poptune.kv import registry as r\ndef f():\n    return r.NAMES\n") == []


def test_every_allowed_import_is_still_there():
    stale = [key for key in ALLOWED_IMPORTS
             if not any(name == key[1]
                        for path in (ROOT / "poptune").rglob("*.py")
                        if path.relative_to(ROOT).as_posix().startswith(key[0])
                        for _, name in imported(path.read_text(encoding="utf-8"), _package(path)))]
    assert not stale, f"allowed imports no longer found (drop them from ALLOWED_IMPORTS): {stale}"
    assert issubclass(type(registry.source(registry.DEFAULT)), KVSource)
