"""An objective of a study: its name, which way it is better, how it is read from a measurement, and its column.

An objective reads a :class:`~poptune.store.measurement.Measurement` (any object with its attributes: this
floor sits below the store) against the study's :class:`References`, the full model's figures that make a
ratio measured side by side into a figure comparable across trials however busy the machine was.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from poptune.errors import MeasurementError

__all__ = ["DIRECTIONS", "Objective", "References", "target_row"]

#: Optuna's directions, the only two an objective may have.
DIRECTIONS = ("minimize", "maximize")
Direction = Literal["minimize", "maximize"]


@dataclass(frozen=True)
class References:
    """A study's reference figures of the full model, each written once by its first measurement.

    Attributes:
        ttft_ms: The reference time to first token (ms), the latency objective's numerator.
        tpot_ms: The reference time per output token at the target length (ms); None: a study stored before it
            (a measurement is then read against its own paired full model).
    """

    ttft_ms: float | None = None
    tpot_ms: float | None = None


@dataclass(frozen=True)
class Objective:
    """One objective of a study.

    Attributes:
        name: What ``--objectives`` calls it.
        direction: ``minimize`` or ``maximize`` (Optuna's words).
        label: Its column's title in the report and the leaderboard.
        unit: The unit of its value (``""``: a share).
        metric: Optuna's metric name; ``{target}`` is the study's target (``512``, ``image-640x480``).
        read: Its value of a measurement, given the study's references.
        cell: Its value as the report's cell.
        about: What it is, in one line (``poptune study --help``, the docs).
    """

    name: str
    direction: Direction
    label: str
    unit: str
    metric: str
    read: Callable[[Any, References], float]
    cell: Callable[[float], str]
    about: str

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise ValueError(f"objective {self.name!r}: direction must be one of {DIRECTIONS}, got {self.direction!r}")

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
