"""An objective of a study: its name, which way it is better, what it asks of the problem, how it is read from a
measurement against the study's reference, and its column.

An objective reads a :class:`~poptune.store.measurement.Measurement` (any object with its attributes: this
floor sits below the store) against the study's :class:`References`, the full model's figures that make a
ratio measured side by side into a figure comparable across trials however busy the machine was. Everything an
objective needs beyond that is a hook of :class:`Objective`, so that adding one touches no other module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from poptune.errors import MeasurementError

__all__ = ["DIRECTIONS", "Objective", "References", "target_row"]

#: Optuna's directions, the only two an objective may have.
DIRECTIONS = ("minimize", "maximize")
Direction = Literal["minimize", "maximize"]


@dataclass(frozen=True)
class References(Mapping[str, float]):
    """A study's reference figures of the full model by objective name, each written once by the first measurement
    that gives it (:attr:`Objective.reference`).

    A mapping: ``references.get("tpot")`` is None where the study has no such reference (a study stored before it,
    an objective without one); the objective then reads a measurement against its own paired full model.

    Attributes:
        figures: The reference figure of each objective that has one, by the objective's name.
    """

    figures: Mapping[str, float] = field(default_factory=dict)

    def __getitem__(self, name: str) -> float:
        return self.figures[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.figures)

    def __len__(self) -> int:
        return len(self.figures)


def _no_requirement(problem: Any) -> str | None:
    return None


@dataclass(frozen=True)
class Objective:
    """One objective of a study: the whole contract an objective module fills in.

    Example: ``tpot`` times decode steps, so it requires ``decode_tokens >= 1`` of the problem
    (``requires``), its reference is the first measurement's full-model time per output token (``reference``,
    stored as the study attribute ``reference_tpot_ms``) and a trial's value is that reference over the trial's
    paired decode speedup (``read``).

    Attributes:
        name: What ``--objectives`` calls it.
        direction: ``minimize`` or ``maximize`` (Optuna's words).
        label: Its column's title in the report and the leaderboard.
        unit: The unit of its value (``""``: a share).
        metric: Optuna's metric name; ``{target}`` is the study's target (``512``, ``image-640x480``).
        read: Its value of a measurement, given the study's references (raises
            :class:`~poptune.errors.MeasurementError` where the measurement cannot give it).
        cell: Its value as the report's cell.
        about: What it is, in one line (``poptune study --help``, the docs).
        requires: Why a tuning problem (:class:`~poptune.problem.problem.TuningProblem`) cannot give it, in a few
            words (``"times decode steps: `decode_tokens` must be >= 1"``), or None where it can.
        reference: The study's reference figure a measurement gives (its paired full model's), or None where the
            measurement has none; None for an objective read without a reference.
        reference_attr: The study attribute its reference is stored under (default ``reference_<name>``; the
            first objectives keep the names studies stored before references had objective names).
    """

    name: str
    direction: Direction
    label: str
    unit: str
    metric: str
    read: Callable[[Any, References], float]
    cell: Callable[[float], str]
    about: str
    requires: Callable[[Any], str | None] = _no_requirement
    reference: Callable[[Any], float | None] | None = None
    reference_attr: str = ""

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise ValueError(f"objective {self.name!r}: direction must be one of {DIRECTIONS}, got {self.direction!r}")
        if not self.reference_attr:
            object.__setattr__(self, "reference_attr", f"reference_{self.name}")

    def better(self, a: float, b: float) -> bool:
        """Whether ``a`` is at least as good as ``b`` on this objective."""
        return a <= b if self.direction == "minimize" else a >= b


def target_row(measurement: Any, name: str) -> Mapping[str, Any]:
    """The measurement's timing row at its target length (what ``name`` is read from).

    Raises:
        MeasurementError: the measurement has no row at its target length.
    """
    row = measurement.latency.get(measurement.target_length)
    if row is None:
        raise MeasurementError(f"objective {name}: no timing at the target length {measurement.target_length}")
    return row
