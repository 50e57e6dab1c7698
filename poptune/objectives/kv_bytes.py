"""``kv_bytes``: the K/V cache of one request at the study's target length, in bytes (minimise).

Measured on the real cache after the configuration's prefill of the target-length prompt
(:func:`poptune.measure.prefill.cache_bytes`: every cache tensor's ``nbytes``, a tensor shared by several layers
once), so a K/V source that compacts some layers is counted as it is; with the layers' own or calibrated K/V the
cache is the full model's.
"""

from __future__ import annotations

from typing import Any

from poptune.errors import MeasurementError
from poptune.objectives.base import Objective, References, target_row

__all__ = ["KV_BYTES"]


def _read(measurement: Any, references: References) -> float:
    value = target_row(measurement, "kv_bytes").get("kv_bytes")
    if value is None:
        raise MeasurementError("objective kv_bytes: the measurement has no K/V cache size (timed before it)")
    return float(value)


KV_BYTES = Objective(
    name="kv_bytes", direction="minimize", label="K/V MiB", unit="bytes", metric="kv_bytes@{target}", read=_read,
    cell=lambda v: f"{v / 2 ** 20:.2f}",
    about="bytes of the K/V cache of one request at the target length, measured after the prefill",
)
