"""Measurement: the one timer and repeat loop, latency records, hardware fingerprints and NVML telemetry."""

from poptune.measure.energy import EnergyReading, energy_pair, energy_per_call, idle_power
from poptune.measure.hardware import HardwareRecord, fingerprint
from poptune.measure.nvml import NvmlDevice, decode_clock_reasons
from poptune.measure.telemetry import Sampler, Telemetry, TelemetryResult, nvml_device
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
    "EnergyReading",
    "HardwareRecord",
    "LatencyRecord",
    "NvmlDevice",
    "PairRecord",
    "RepeatPolicy",
    "Sampler",
    "Staged",
    "Telemetry",
    "TelemetryResult",
    "Timer",
    "decode_clock_reasons",
    "energy_pair",
    "energy_per_call",
    "fingerprint",
    "idle_power",
    "measure",
    "measure_pair",
    "nvml_device",
    "percentile",
]
