"""``energy``: joules per prefill at the study's target length, where NVML gives it (minimise).

What is read: the energy blocks :func:`poptune.measure.energy.energy_pair` runs beside the timed pairs of every
bench row (on a CUDA device with NVML, the default ``energy_seconds``): each side, POP's configuration and the
full model, called back to back in blocks of at least a second, the blocks alternated (POP, full, full, POP,
...), NVML's total-energy counter read across each block on its update steps; each side's joules per prefill is
the median of its blocks (``energy_pop_j``, ``energy_full_j`` in the target length's timing row, gross: what the
GPU drew, idle power included, as a user's meter would).

The objective is the study's reference full-model joules per prefill times the configuration's paired energy
ratio (``energy_pop_j / energy_full_j``, both sides measured in the same alternated run), as ``ttft`` is the
reference TTFT over the paired speedup: a raw figure would rank trials by the GPU's temperature and clocks while
each was measured. A study stored without the reference reads each trial against its own full model (then the
value is POP's own joules per prefill).

NVML is what gives the figure: a problem on the CPU cannot have this objective (refused when it is made), and a
GPU without an energy counter (older than Volta) fails the measurement with NVML's reason, never a number.
"""

from __future__ import annotations

from typing import Any

from poptune.errors import MeasurementError
from poptune.objectives.base import Objective, References, target_row

__all__ = ["ENERGY"]

NAME = "energy"


def _joules(measurement: Any) -> tuple[float, float]:
    """POP's and the full model's joules per prefill at the target length."""
    row = target_row(measurement, NAME)
    pop, full = row.get("energy_pop_j"), row.get("energy_full_j")
    if not pop or not full:
        reason = row.get("energy_reason") or "no energy blocks in its timing row"
        raise MeasurementError(f"objective {NAME}: no NVML energy per prefill ({reason})")
    return float(pop), float(full)


def _read(measurement: Any, references: References) -> float:
    pop, full = _joules(measurement)
    return references.get(NAME, full) * pop / full


def _reference(measurement: Any) -> float | None:
    row = measurement.latency.get(measurement.target_length, {})
    value = row.get("energy_full_j")
    return float(value) if value else None


def _requires(problem: Any) -> str | None:
    if str(problem.device).startswith("cuda"):
        return None
    return f"is read from NVML's energy counter: `device` must be a CUDA GPU, got {problem.device!r}"


ENERGY = Objective(
    name=NAME, direction="minimize", label="energy J", unit="J", metric="energy_j@{target}", read=_read,
    cell=lambda v: f"{v:.3f}",
    about="joules per prefill at the target length (NVML): the reference full model's times the paired energy "
          "ratio",
    requires=_requires, reference=_reference,
)
