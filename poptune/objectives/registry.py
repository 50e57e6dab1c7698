"""The objectives a study may have, one line each, and everything that iterates over them.

A study's objectives are a tuple of names (``--objectives ttft,accuracy``, the default :data:`DEFAULT`), stored
with its problem. From it: Optuna's directions (:func:`directions`) and metric names (:func:`metric_names`), a
measurement's values in that order (:func:`values_of`), stored values read back by name (:func:`named`), and the
one Pareto dominance every front uses (:func:`dominates`). Nowhere else is an objective read by its position.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from poptune.errors import ConfigError
from poptune.objectives.accuracy import ACCURACY
from poptune.objectives.base import Direction, Objective, References
from poptune.objectives.kv_bytes import KV_BYTES
from poptune.objectives.tpot import TPOT
from poptune.objectives.ttft import TTFT

__all__ = ["DEFAULT", "OBJECTIVES", "check", "directions", "dominates", "get", "metric_names", "named", "parse",
           "values_of", "weakly_dominates"]

#: Every objective by name: adding one is a module of this package and a line here.
OBJECTIVES: dict[str, Objective] = {o.name: o for o in (
    TTFT,
    ACCURACY,
    TPOT,
    KV_BYTES,
)}

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
