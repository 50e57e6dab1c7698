"""``tpot``: time per output token at the study's target context (minimise).

After each side's own prefill of the target-length prompt, greedy decode steps are timed against the full model's
as interleaved A-B/B-A pairs (:func:`poptune.measure.timer.measure_pair`, the decode pair of
:func:`poptune.measure.bench.run_bench`), with the 95% interval of the median per-pair ratio. The objective is the
study's reference full-model TPOT over that decode speedup, as ``ttft`` is for the prefill. POP decodes with the
full model, so its TPOT differs only where its K/V cache does (a K/V source that compacts layers) or where a
baseline removes layers; the problem needs ``decode_tokens >= 1``.
"""

from __future__ import annotations

from typing import Any

from poptune.errors import MeasurementError
from poptune.objectives.base import Objective, References, target_row

__all__ = ["TPOT"]


def _read(measurement: Any, references: References) -> float:
    row = target_row(measurement, "tpot")
    full, pop = row.get("decode_full_ms_per_token"), row.get("decode_pop_ms_per_token")
    speedup = row.get("decode_speedup") or (full / pop if full and pop else None)
    if not speedup:
        raise MeasurementError("objective tpot: no decode pairs were timed (decode_tokens 0?)")
    reference = references.get(NAME, full)
    if reference is None:
        raise MeasurementError("objective tpot: no full-model time per output token to read the speedup against")
    return float(reference) / float(speedup)


def _reference(measurement: Any) -> float | None:
    value = measurement.latency.get(measurement.target_length, {}).get("decode_full_ms_per_token")
    return None if value is None else float(value)


def _requires(problem: Any) -> str | None:
    return None if problem.decode_tokens >= 1 else "times decode steps: `decode_tokens` must be >= 1"


NAME = "tpot"

TPOT = Objective(
    name=NAME, direction="minimize", label="TPOT ms", unit="ms", metric="tpot_ms@{target}", read=_read,
    cell=lambda v: f"{v:.2f}",
    about="time per output token at the target context: the reference full-model TPOT over the paired decode "
          "speedup (ms)",
    requires=_requires, reference=_reference, reference_attr="reference_tpot_ms",
)
