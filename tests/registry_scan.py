"""The scan behind every "named in its home only" test (K/V sources, boundary rules, baselines): each module of the
package outside the extension's homes is parsed (nothing is imported) and its string literals, docstrings aside,
are read; a literal that names an extension is a finding unless allowed one by one, with its reason."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: A scan: ``(line, literal)`` of every string literal of a module's source that names an extension.
Violations = Callable[[str], list[tuple[int, str]]]


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def literals(source: str, names: Callable[[str], object]) -> list[tuple[int, str]]:
    """``(line, literal)`` of every string literal of ``source``, docstrings aside, for which ``names`` is true."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
            and names(node.value)]


def modules(homes: tuple[str, ...]) -> list[tuple[str, Path]]:
    """The package's modules outside ``homes``: (path from the repository root, path)."""
    return [(p.relative_to(ROOT).as_posix(), p) for p in sorted((ROOT / "poptune").rglob("*.py"))
            if not p.relative_to(ROOT).as_posix().startswith(homes)]


def outside(homes: tuple[str, ...], violations: Violations, allowed: Iterable[tuple[str, str]]) -> list[str]:
    """``module:line: literal`` of every literal outside ``homes`` that names an extension and is not allowed."""
    allowed = set(allowed)
    return [f"{relative}:{line}: {value!r}" for relative, path in modules(homes)
            for line, value in violations(path.read_text(encoding="utf-8")) if (relative, value) not in allowed]


def stale(allowed: Iterable[tuple[str, str]], violations: Violations) -> list[tuple[str, str]]:
    """The allowed uses no longer found where they are allowed."""
    return [key for key in allowed
            if key[1] not in [v for _, v in violations((ROOT / key[0]).read_text(encoding="utf-8"))]]
