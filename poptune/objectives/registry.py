"""The objectives a study may have, one line each, and everything that iterates over them.

A study's objectives are a tuple of names (``--objectives ttft,accuracy``, the default :data:`DEFAULT`), stored
with its problem. From it: Optuna's directions (:func:`directions`) and metric names (:func:`metric_names`), a
measurement's values in that order (:func:`values_of`), stored values read back by name (:func:`named`), and the
one Pareto dominance every front uses (:func:`dominates`). Nowhere else is an objective read by its position.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from importlib import import_module
from typing import Any

from poptune.errors import ConfigError
from poptune.objectives.base import Direction, Objective, References

__all__ = ["DEFAULT", "OBJECTIVES", "check", "check_problem", "directions", "dominates", "get", "metric_names",
           "named", "new_references", "parse", "values_of", "weakly_dominates"]


def _registered(entries: Iterable[str]) -> dict[str, Objective]:
    """The objectives of ``entries`` (``module:NAME``, a module of this package and its :class:`Objective`) by
    name, in their order."""
    found: dict[str, Objective] = {}
    for entry in entries:
        module, _, attr = entry.partition(":")
        objective = getattr(import_module(f"{__package__}.{module}"), attr)
        assert isinstance(objective, Objective) and objective.name not in found, entry
        found[objective.name] = objective
    return found


#: Every objective by name, in the order ``--objectives`` lists them: adding one is a module of this package and
#: a line here.
OBJECTIVES: dict[str, Objective] = _registered((
    "ttft:TTFT",
    "accuracy:ACCURACY",
    "tpot:TPOT",
    "kv_bytes:KV_BYTES",
    "energy:ENERGY",
))

#: A study's objectives unless it says otherwise (and those of every study stored before objectives had names).
DEFAULT: tuple[str, ...] = ("ttft", "accuracy")


def get(name: str) -> Objective:
    """The objective called ``name``.

    Raises:
        ConfigError: no objective is called so.
    """
    if name not in OBJECTIVES:
        raise ConfigError(f"unknown objective {name!r}: use {', '.join(OBJECTIVES)}")
    return OBJECTIVES[name]


def check(names: Sequence[str]) -> tuple[str, ...]:
    """``names`` as a study's objectives: at least two, distinct and known.

    Raises:
        ConfigError: fewer than two, a repeat, or an unknown name (in one line).
    """
    names = tuple(names)
    unknown = [n for n in names if n not in OBJECTIVES]
    if unknown:
        raise ConfigError(f"unknown objective(s) {', '.join(map(repr, unknown))}: use {', '.join(OBJECTIVES)}")
    if len(names) < 2 or len(set(names)) != len(names):
        raise ConfigError(f"a study needs two or more distinct objectives of {', '.join(OBJECTIVES)}, got "
                          f"{', '.join(names) or 'none'}")
    return names


def check_problem(names: Sequence[str], problem: Any) -> None:
    """Whether ``problem`` (a :class:`~poptune.problem.problem.TuningProblem`) can give each objective of
    ``names`` (:attr:`~poptune.objectives.base.Objective.requires`).

    Raises:
        ConfigError: the first objective it cannot give, and why (in one line).
    """
    for name in names:
        reason = get(name).requires(problem)
        if reason is not None:
            raise ConfigError(f"objective `{name}` {reason}")


def new_references(references: Mapping[str, float], measurement: Any) -> dict[str, float]:
    """The reference figures ``measurement`` gives (its paired full model's) that ``references`` lacks, by
    objective name: what a study writes once, from its first measurement that has each
    (:attr:`~poptune.objectives.base.Objective.reference`). Every registered objective's, so that a figure of any
    of them can be read against the study's reference, not only its objectives' values."""
    found: dict[str, float] = {}
    for o in OBJECTIVES.values():
        if o.reference is not None and references.get(o.name) is None:
            value = o.reference(measurement)
            if value is not None:
                found[o.name] = float(value)
    return found


def parse(text: str) -> tuple[str, ...]:
    """Comma-separated objective names (``ttft,accuracy,kv_bytes``), checked (:func:`check`)."""
    return check([part.strip() for part in text.split(",") if part.strip()])


def directions(names: Sequence[str]) -> list[Direction]:
    """Optuna's ``directions`` of a study with objectives ``names``."""
    return [get(n).direction for n in names]


def metric_names(names: Sequence[str], target: str) -> list[str]:
    """Optuna's metric names of a study with objectives ``names`` whose target is ``target``."""
    return [get(n).metric.format(target=target) for n in names]


def values_of(names: Sequence[str], measurement: Any, references: References) -> tuple[float, ...]:
    """A measurement's objective values, in the order of ``names`` (what a trial returns to Optuna)."""
    return tuple(float(get(n).read(measurement, references)) for n in names)


def named(names: Sequence[str], values: Sequence[float] | None) -> dict[str, float]:
    """Stored objective ``values`` by name (a trial's ``values`` in the order of its study's ``names``); empty
    where a trial has none or another number of them (a trial of another study)."""
    if values is None or len(values) != len(names):
        return {}
    return dict(zip(names, map(float, values)))


def weakly_dominates(a: Mapping[str, float], b: Mapping[str, float], names: Sequence[str]) -> bool:
    """Whether ``a`` is at least as good as ``b`` on every objective of ``names``."""
    return all(get(n).better(a[n], b[n]) for n in names)


def dominates(a: Mapping[str, float], b: Mapping[str, float], names: Sequence[str]) -> bool:
    """Pareto dominance: ``a`` at least as good as ``b`` on every objective of ``names`` and not equal on all."""
    return weakly_dominates(a, b, names) and any(a[n] != b[n] for n in names)
