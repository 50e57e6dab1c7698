"""Stored drops re-decided: a trial's paired drop recomputed by the current interval from its per-item outcomes.

A study keeps every trial's per-item outcomes and the full model's (study attribute ``full_run``), so a better
interval (:mod:`poptune.evaluate.paired`) re-decides what is stored without measuring anything again: the grid's
table and the leaderboards are rewritten from it. Trials stored without outcomes, and the full model itself
(0 exactly), keep their drop. A drop stored with its race's looks (items per task at each) and planned size is
re-decided over the same design; one stored without them (before designs were stored) is re-decided as one look
at its items.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from poptune.store.measurement import Measurement

__all__ = ["redecide"]


def redecide(measurement: Measurement, full_run: Mapping[str, Any] | None) -> Measurement:
    """``measurement`` with its drop recomputed from its outcomes against ``full_run`` (a stored ``TaskRun``)."""
    from poptune.evaluate.paired import PairedDrop
    from poptune.evaluate.suite import TaskRun, drop_of

    if measurement.config.skip == 0 and measurement.method == "pop":
        return replace(measurement, drop=PairedDrop.identical(measurement.items).to_dict())
    stored = measurement.outcomes
    if not full_run or not stored or not all(stored.values()) or measurement.drop is None:
        return measurement
    full = TaskRun.from_dict(full_run)
    items = {t: full.items[t][: len(v)] for t, v in measurement.outcomes.items()}
    run = TaskRun({t: {} for t in items}, items, {t: list(v) for t, v in measurement.outcomes.items()})
    before = PairedDrop.from_dict(measurement.drop) if "items" in measurement.drop else None
    looks = [dict(look) for look in before.looks] if before is not None and before.looks else None
    planned = before.planned if before is not None and looks else None
    return replace(measurement, drop=drop_of(full, run, looks=looks, planned=planned).to_dict())
