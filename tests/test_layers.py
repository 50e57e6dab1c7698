"""The house's rules, checked on the source: one import rule, no cycles, modules and functions stay small, every
module named in ``docs/architecture.md``.

Every module of the package is parsed with :mod:`ast` (nothing is imported). Each gets the rank of its floor
(:data:`RANKS`, lowest first; ``docs/architecture.md`` describes the floors). **The import rule**, one for every
import of the package's own code, module-level or in a function (lazy), ``TYPE_CHECKING`` ones too: it is written
absolute (``from poptune.measure.bench import run_bench``, never a relative ``from .bench import``), and it points
down -- to a module of its own rank or lower, not a sibling package of its floor (:data:`SIBLINGS`), never the
package root's names (the root sits above everything and imports lazily). The import graph has no cycle, between
modules or between packages. ``from pkg import name`` counts as an import of ``pkg.name`` when that is a module,
else of ``pkg`` itself; importing a submodule is not counted as importing its parent package's ``__init__``
(Python runs it, but it is the submodule the code uses). Sizes count code lines only: no docstrings, comments or
blank lines.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "poptune"

#: Floors, lowest first: (rank, module or package prefix). A module takes the rank of its longest prefix.
RANKS: tuple[tuple[int, str], ...] = (
    (0, "poptune.errors"), (0, "poptune.files"), (0, "poptune.jsonfile"), (0, "poptune.device"),
    (0, "poptune.progress"), (0, "poptune.patching"), (0, "poptune.data"), (0, "poptune.plots"),
    (0, "poptune.transform"),
    (0, "poptune.testing"), (0, "poptune.version"), (0, "poptune.cache"), (0, "poptune.interval"),
    (1, "poptune.models"),
    (2, "poptune.kv"), (2, "poptune.boundary"), (2, "poptune.engine"), (2, "poptune.serving"),
    (3, "poptune.measure"), (3, "poptune.evaluate"), (3, "poptune.kvfit"),
    (4, "poptune.baselines"), (4, "poptune.objectives"),
    (5, "poptune.store"),
    (6, "poptune.problem"),
    (7, "poptune.tune"), (7, "poptune.env"),
    (8, "poptune.reports"), (8, "poptune.gpucheck"), (8, "poptune.comparison"),
    (9, "poptune.cli"), (9, "poptune.__main__"),
)

#: Packages of one floor that must not import each other (siblings, not a stack).
SIBLINGS: tuple[tuple[str, str], ...] = (("poptune.measure", "poptune.evaluate"), ("poptune.tune", "poptune.env"))

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60



@dataclass(frozen=True)
class Import:
    """One import statement's target, as a module of the package (or the root itself)."""

    importer: str
    target: str
    line: int
    relative: bool = False


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted((ROOT / PACKAGE).rglob("*.py"))}


MODULES = _modules()


def _resolve(importer: str, node: ast.ImportFrom) -> str:
    """The absolute module ``from ... import`` names, relative levels resolved."""
    if not node.level:
        return node.module or ""
    is_package = MODULES[importer].name == "__init__.py"
    base = importer.split(".")
    base = base[: len(base) - node.level + (1 if is_package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(name: str, path: Path) -> list[Import]:
    """Every import of a package module in ``path``, at any depth (function bodies, ``if TYPE_CHECKING``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = _resolve(name, node)
            targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in MODULES else module for a in node.names]
        else:
            continue
        relative = isinstance(node, ast.ImportFrom) and node.level > 0
        found += [Import(name, t, node.lineno, relative) for t in dict.fromkeys(targets)
                  if t == PACKAGE or t.startswith(PACKAGE + ".")]
    return found


def _rank(module: str) -> int | None:
    matches = [(len(prefix), rank) for rank, prefix in RANKS if module == prefix or module.startswith(prefix + ".")]
    return max(matches)[1] if matches else None


def _sibling_of(a: str, b: str) -> bool:
    def inside(m: str, p: str) -> bool:
        return m == p or m.startswith(p + ".")

    return any(inside(a, x) and inside(b, y) or inside(a, y) and inside(b, x) for x, y in SIBLINGS)


def _graph() -> dict[str, list[Import]]:
    return {name: _imports(name, path) for name, path in MODULES.items() if name != PACKAGE}


def test_every_module_has_a_rank():
    missing = [name for name in MODULES if name != PACKAGE and _rank(name) is None]
    assert not missing, f"modules without a floor in tests/test_layers.py RANKS (add them): {missing}"


def test_the_import_rule():
    # Absolute, and down the floors (see the module's docstring): one rule, each breach named by what it breaks.
    bad = []
    for importer, imports in _graph().items():
        for imp in imports:
            if imp.relative:
                problem = f"a relative import (write it absolute: from {imp.target} import ...)"
            elif imp.target == PACKAGE:
                problem = "imports names from the package root (import the defining module instead)"
            elif imp.target not in MODULES:
                problem = "imports a module that does not exist"
            elif (_rank(imp.target) or 0) > (_rank(importer) or 0):
                problem = f"imports upward (rank {_rank(importer)} -> {_rank(imp.target)})"
            elif _sibling_of(importer, imp.target):
                problem = "imports a sibling package of its floor"
            else:
                continue
            bad.append(f"{MODULES[importer].relative_to(ROOT)}:{imp.line}: {importer} -> {imp.target}: {problem}")
    assert not bad, "imports must be absolute and point down (see docs/architecture.md):\n" + "\n".join(bad)


def test_the_import_rule_sees_relative_imports(tmp_path):
    path = tmp_path / "bench.py"
    path.write_text("from .timer import measure\nfrom poptune.measure import timer\n", encoding="utf-8")
    assert [(i.target, i.relative) for i in _imports("poptune.measure.bench", path)] == [
        ("poptune.measure.timer", True), ("poptune.measure.timer", False)]


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (or a module importing itself), Tarjan."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in edges.get(node, ()):
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def _cycle_path(component: list[str], edges: dict[str, set[str]]) -> list[str]:
    """One concrete loop through a strongly connected component, for the message."""
    members, start = set(component), component[0]
    path, seen = [start], {start}
    while True:
        nxt = sorted(edges[path[-1]] & members)
        if start in nxt and len(path) > 1 or nxt == [start]:
            return path + [start]
        step = next((n for n in nxt if n not in seen), None)
        if step is None:  # revisit: cut the path at the first repeat
            step = nxt[0]
            return path[path.index(step):] + [step]
        path.append(step)
        seen.add(step)


def test_no_import_cycles():
    edges: dict[str, set[str]] = {}
    for importer, imports in _graph().items():
        edges[importer] = {i.target for i in imports if i.target in MODULES and i.target != PACKAGE
                          }
    cycles = [" -> ".join(_cycle_path(c, edges)) for c in _cycles(edges)]
    assert not cycles, "import cycles (module-level or lazy):\n" + "\n".join(cycles)


def _package(module: str) -> str:
    """The floor's unit a module belongs to: ``poptune.measure.bench`` -> ``poptune.measure``."""
    return ".".join(module.split(".")[:2])


def test_no_import_cycles_between_packages():
    # Module by module there may be no cycle while packages still loop (a.x -> b.y, b.z -> a.w): that is the
    # loop the layering exists to prevent, so it is checked on the packages (and top-level modules) too.
    edges: dict[str, set[str]] = {}
    for importer, imports in _graph().items():
        for i in imports:
            if i.target in MODULES and i.target != PACKAGE:
                if _package(importer) != _package(i.target):
                    edges.setdefault(_package(importer), set()).add(_package(i.target))
    cycles = [" -> ".join(_cycle_path(c, edges)) for c in _cycles(edges)]
    assert not cycles, "import cycles between packages:\n" + "\n".join(cycles)


def test_the_environments_do_not_import_the_tuner():
    # Both stand on the Optuna-free problem (poptune.problem) and neither imports the other (SIBLINGS); kept apart
    # so that the failure names the rule: an environment never needs Optuna's tuner to step.
    bad = [f"{MODULES[i.importer].relative_to(ROOT)}:{i.line}: {i.target}" for name, imports in _graph().items()
           if _package(name) == "poptune.env" for i in imports if _package(i.target) == "poptune.tune"]
    assert not bad, "poptune.env imports poptune.tune (import the poptune.problem module instead):\n" + "\n".join(bad)


def test_no_module_imports_the_package_root_names():
    # Covered by test_the_import_rule; kept apart so the failure names the rule.
    bad = [f"{MODULES[i.importer].relative_to(ROOT)}:{i.line}" for imports in _graph().values()
           for i in imports if i.target == PACKAGE]
    assert not bad, "`from poptune import <name>` inside the package (import the defining module):\n" + "\n".join(bad)


# --------------------------------------------------------------------------------------------------------------
# Size: code lines only (no docstrings, comments or blank lines)


def _docstring_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def code_lines(source: str) -> set[int]:
    """The line numbers holding code: a token other than a comment or a newline, outside docstrings."""
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
            tokenize.ENDMARKER, tokenize.ENCODING}
    lines: set[int] = set()
    for token in tokenize.tokenize(io.BytesIO(source.encode("utf-8")).readline):
        if token.type not in skip:
            lines.update(range(token.start[0], token.end[0] + 1))
    return lines - _docstring_lines(ast.parse(source))


def _sizes() -> tuple[dict[str, int], dict[str, int]]:
    modules, functions = {}, {}
    for name, path in MODULES.items():
        source = path.read_text(encoding="utf-8")
        lines = code_lines(source)
        modules[name] = len(lines)
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                span = range(first, node.end_lineno + 1)
                functions[f"{name}:{node.lineno}:{node.name}"] = len(lines.intersection(span))
    return modules, functions


def test_modules_and_functions_stay_small():
    modules, functions = _sizes()
    big = [f"{name}: {n} code lines (> {MAX_MODULE_LINES})" for name, n in modules.items()
           if n > MAX_MODULE_LINES]
    big += [f"{key}: {n} code lines (> {MAX_FUNCTION_LINES})" for key, n in functions.items()
            if n > MAX_FUNCTION_LINES]
    assert not big, "split these (docstrings, comments and blank lines not counted):\n" + "\n".join(big)


def test_code_lines_rule():
    source = ('"""Doc.\n\nMore."""\n\nimport os  # why\n\n\n'
              'def f(x):\n    """Doc."""\n    # note\n    return (x +\n            1)\n')
    assert sorted(code_lines(source)) == [5, 8, 11, 12]


# --------------------------------------------------------------------------------------------------------------
# The map: docs/architecture.md names every module of the package by its path, and no module that is gone

ARCHITECTURE = ROOT / "docs" / "architecture.md"


def test_the_architecture_names_every_module():
    named = set(re.findall(r"`(poptune/[\w/]+\.py)`", ARCHITECTURE.read_text(encoding="utf-8")))
    files = {path.relative_to(ROOT).as_posix() for path in MODULES.values()}
    missing, gone = sorted(files - named), sorted(named - files)
    assert not missing, "modules docs/architecture.md does not name (add a line `poptune/....py`: its role):\n" + \
        "\n".join(missing)
    assert not gone, "docs/architecture.md names modules that do not exist (moved or removed?):\n" + "\n".join(gone)
