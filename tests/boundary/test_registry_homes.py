"""Issue 88 (item 4): boundary rules are named in their homes only (``poptune/boundary/``), so that a new rule is one
module and one registry line.

Every module of the package outside ``poptune/boundary/`` is parsed (nothing is imported) and its string literals,
docstrings aside, are read: a literal that *is* a rule's name (``"last"``, ``"/window-64"``: punctuation around it
aside) or starts a window's (``"window-"``) names the rule where it should ask :mod:`poptune.boundary.registry`
(``rule(name).width``, ``DEFAULT``, ``NAMES``, ``ordered``). What remains is allowed one by one, each with its
reason. Nor does any module outside keep its own copy of the registry's list (``BOUNDARIES = registry.NAMES``).
"""

from __future__ import annotations

import ast
from pathlib import Path

from poptune.boundary import registry
from tests import registry_scan

ROOT = Path(__file__).resolve().parents[2]
HOMES = ("poptune/boundary/",)

#: (module, literal) pairs that use a rule's name for something else, and why.
_REDUCTION = "torch's cross_entropy reduction, not a boundary rule"
_NOTHING = "the word for an empty list in a message or a table, not a boundary rule"
_OFF = "a user's word for switching an option off, not a boundary rule"
ALLOWED: dict[tuple[str, str], str] = {
    ("poptune/baselines/importance.py", "none"): _REDUCTION,
    ("poptune/kvfit/check.py", "none"): _REDUCTION,
    ("poptune/kvfit/fit.py", "none"): "SINK_MODES: sink tokens not fitted, a fitting option",
    ("poptune/cli/_args.py", "(none)"): _NOTHING,
    ("poptune/tune/efficiency.py", "(none)"): _NOTHING,
    ("poptune/objectives/registry.py", "none"): _NOTHING,
    ("poptune/reports/leaderboard.py", "none"): _NOTHING,
    ("poptune/reports/study_report.py", "none"): _NOTHING,
    ("poptune/store/studies.py", "none"): _NOTHING,
    ("poptune/cli/_checks.py", "none"): _OFF,
    ("poptune/cli/compare.py", "none"): _OFF,
    ("poptune/cli/study.py", "none"): _OFF,
}

_STRIP = " /,.;:_`'\"()"


def _names(value: str) -> bool:
    """Whether ``value`` names a rule: as itself, or a window by its prefix."""
    bare = value.strip(_STRIP)
    return any(bare == r.name for r in registry.RULES) or bare == "window-" or bare.startswith("window-")


def violations(source: str) -> list[tuple[int, str]]:
    """``(line, literal)`` of every string literal of ``source`` naming a boundary rule, docstrings aside."""
    return registry_scan.literals(source, _names)


def test_no_module_outside_the_registry_names_a_boundary_rule():
    found = registry_scan.outside(HOMES, violations, ALLOWED)
    assert not found, ("boundary rules named outside poptune/boundary/ (ask poptune.boundary.registry: rule(name), "
                       "DEFAULT, NAMES, ordered):\n" + "\n".join(found))


def test_every_allowed_use_is_still_there():
    stale = registry_scan.stale(ALLOWED, violations)
    assert not stale, f"allowed uses no longer found (drop them from ALLOWED): {stale}"


def test_the_scan_catches_a_rule_named_in_code():
    assert violations('if config.boundary == "last":\n    pass\n') == [(1, "last")]
    assert violations('x = f"{skip}/window-64/0"\n') == [(1, "/window-64/0")]  # an f-string's literal part
    assert violations('width = int(name.removeprefix("window-"))\n') == [(1, "window-")]
    assert violations('def f():\n    """The last token, a window-4, or none."""\n') == []


def _aliases(source: str) -> list[tuple[int, str]]:
    """Module-level assignments of ``source`` whose value reads the boundary registry's lists (``NAMES``, ``RULES``,
    ``BOUNDARIES``)."""
    tree = ast.parse(source)
    lists = ("NAMES", "RULES", "BOUNDARIES")
    modules, names = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("boundary"):
            modules |= {a.asname or a.name for a in node.names if a.name == "registry"}
        if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("boundary.registry"):
            names |= {a.asname or a.name for a in node.names if a.name in lists}
    found = []
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            if any(isinstance(part, ast.Attribute) and part.attr in lists and isinstance(part.value, ast.Name)
                   and part.value.id in modules or isinstance(part, ast.Name) and part.id in names
                   for part in ast.walk(node.value)):
                found.append((node.lineno, ast.unparse(node)))
    return found


def test_no_module_outside_the_registry_copies_its_list_of_rules():
    found = [f"{relative}:{line}: {text}" for relative, path in registry_scan.modules(HOMES)
             for line, text in _aliases(path.read_text(encoding="utf-8"))]
    assert not found, "aliases of the registry's list (read boundary_registry.NAMES where needed):\n" + "\n".join(found)
    assert _aliases("from poptune.boundary import registry as r\nB = tuple(r.NAMES)\n") == [
        (2, "B = tuple(r.NAMES)")]
