"""``accuracy``: mean task accuracy (maximise).

The full model's accuracy on the study's reference items minus the configuration's paired drop, comparable across
trials that scored different numbers of items (:attr:`~poptune.store.measurement.Measurement.objective_accuracy`).
"""

from __future__ import annotations

from typing import Any

from poptune.objectives.base import Objective, References

__all__ = ["ACCURACY"]


def _read(measurement: Any, references: References) -> float:
    return float(measurement.objective_accuracy)


ACCURACY = Objective(
    name="accuracy", direction="maximize", label="accuracy", unit="", metric="accuracy", read=_read,
    cell=lambda v: f"{100 * v:.2f}%",
    about="mean task accuracy: the full model's on the reference items minus the paired drop",
)
