"""``ttft``: time to first token, the prefill latency POP shortens (minimise).

The study's reference full-model TTFT over the configuration's paired speedup (POP and the full model timed side
by side in interleaved pairs, over the workload's timed lengths): a raw latency would rank trials by how busy the
machine was while each was timed; the raw p50s stay in the trial's attributes.
"""

from __future__ import annotations

from typing import Any

from poptune.objectives.base import Objective, References

__all__ = ["TTFT", "latency_objective"]


def latency_objective(reference_ms: float, speedup: float) -> float:
    """A study's latency objective: its reference full-model TTFT over a configuration's paired speedup.

    Ranking by the paired speedup against one reference, not by the raw TTFT, keeps trials comparable however
    busy the machine was while each was timed.
    """
    return reference_ms / speedup


def _read(measurement: Any, references: References) -> float:
    reference = references.get(NAME)
    return latency_objective(reference if reference is not None else measurement.full_ms, measurement.speedup)


def _reference(measurement: Any) -> float | None:
    return float(measurement.full_ms)


NAME = "ttft"

TTFT = Objective(
    name=NAME, direction="minimize", label="objective ms", unit="ms", metric="prefill_ms@{target}", read=_read,
    cell=lambda v: f"{v:.1f}",
    about="time to first token: the study's reference full-model TTFT over the paired speedup (ms)",
    reference=_reference, reference_attr="reference_prefill_ms",
)
