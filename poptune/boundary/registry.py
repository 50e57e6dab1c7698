"""The boundary rules by name: the one place that lists them (a new rule is one module and one line here).

Everything that needs a rule -- ``PopConfig`` validating ``boundary``, the engine pruning a segment, the FLOPs ideal,
the search space (its points, Optuna's choices, the environment's action space), the structured sampler's order --
asks :func:`rule` (which also checks a name: the one check) or reads :data:`NAMES`, the rules a study searches; a
test (``tests/boundary/test_registry_homes.py``) finds no rule named anywhere else in the package.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from poptune.boundary import last, none, window
from poptune.boundary.rule import BoundaryRule
from poptune.errors import ConfigError

__all__ = ["BOUNDARIES", "DEFAULT", "FAMILIES", "NAMES", "PRUNE_ALL", "RULES", "ordered", "rule"]

#: The rules a study searches. An index into it names a rule (an environment's action): new ones last.
RULES: tuple[BoundaryRule, ...] = (
    none.RULE,
    last.RULE,
    window.window(4),
    window.window(16),
    window.window(64),
)

#: Rules taken by name beyond those searched: (how the name is written, its reader).
FAMILIES: tuple[tuple[str, Callable[[str], BoundaryRule | None]], ...] = (
    (window.FORM, window.parse),
)

#: The searched rules' names, in that order.
NAMES: tuple[str, ...] = tuple(r.name for r in RULES)

#: The paper's rule: what a configuration without ``boundary`` means.
DEFAULT: str = last.RULE.name

#: The rule that keeps no token at full depth (lm-eval reads its name, ``none``, as None).
PRUNE_ALL: str = none.RULE.name

#: The searched rules' names under the public API's name (``poptune.BOUNDARIES``); the package reads :data:`NAMES`.
BOUNDARIES: tuple[str, ...] = NAMES


def rule(name: str, *, what: str = "`boundary`") -> BoundaryRule:
    """The rule called ``name`` (a searched one, else one of a family), or :class:`ConfigError` naming them (``what``:
    what held the name, for the message). Reads :data:`RULES` and :data:`FAMILIES` when called."""
    if isinstance(name, str):
        for known in RULES:
            if known.name == name:
                return known
        for _, parse in FAMILIES:
            found = parse(name)
            if found is not None:
                return found
    forms = "".join(f" (or {form})" for form, _ in FAMILIES)
    raise ConfigError(f"{what} must be one of {', '.join(r.name for r in RULES)}{forms}, got {name!r}")


def ordered(names: Iterable[str] | None = None) -> tuple[str, ...]:
    """``names`` (default: the searched rules) in the search's order, the contract's (:meth:`BoundaryRule.order`):
    fewer tokens at full depth first."""
    return tuple(sorted(NAMES if names is None else names, key=lambda n: rule(n).order()))
