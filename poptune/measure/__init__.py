"""Measurement: the one timer and repeat loop, latency records, hardware fingerprints and NVML telemetry."""

from poptune.measure.hardware import HardwareRecord, Telemetry, TelemetryResult, decode_clock_reasons, fingerprint
from poptune.measure.timer import (
    LatencyRecord,
    PairRecord,
    RepeatPolicy,
    Staged,
    Timer,
    measure,
    measure_pair,
    percentile,
)

__all__ = [
    "HardwareRecord",
    "LatencyRecord",
    "PairRecord",
    "RepeatPolicy",
    "Staged",
    "Telemetry",
    "TelemetryResult",
    "Timer",
    "decode_clock_reasons",
    "fingerprint",
    "measure",
    "measure_pair",
    "percentile",
]
