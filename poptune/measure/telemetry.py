"""GPU telemetry during work: NVML read before and after a block, or sampled in the background per row.

:class:`Telemetry` reads NVML once before and once after a block (a whole run). :class:`Sampler` reads it
10-20 times a second on a background thread while a row's timed pairs run (the repeat loop enters it after
the warm-up, :func:`poptune.measure.timer.measure_pair`'s ``during``), and sums the readings up per row: SM
clock range, power, temperature, the clock event reasons seen and those that fail the row
(:func:`failing_reasons`: thermal and hardware slowdowns and an SM-clock dip fail it; the power cap, normal at
full load, is only recorded). Neither lets an NVML error through; where nothing could be read, the reason is
recorded instead.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import torch

from poptune.device import resolve_device
from poptune.errors import ConfigError
from poptune.measure.hardware import HardwareRecord
from poptune.measure.nvml import NvmlDevice, torch_uuid

__all__ = ["FAILING_REASONS", "INFORMATIONAL_REASONS", "SAMPLE_HZ", "SM_CLOCK_DIP", "Sampler", "Telemetry",
           "TelemetryResult", "failing_reasons", "nvml_device"]

#: How often :class:`Sampler` reads NVML (per second): often enough to see a clock dip within one prefill
#: pair, rare enough that the sampling thread costs the timed work nothing measurable.
SAMPLE_HZ = 15.0

#: Clock event reasons that fail a row: the GPU slowed itself down for heat or by a hardware signal, so the row
#: is not a measurement of the chip at its working clocks.
FAILING_REASONS = ("hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")

#: Clock event reasons recorded but normal at full load: a compute-bound row at the board's power limit shows
#: ``sw_power_cap`` in some reading (the clock governor holding power at its limit is how a healthy GPU runs),
#: and the others are settings or idleness, not slowdowns.
INFORMATIONAL_REASONS = ("sw_power_cap", "gpu_idle", "applications_clocks_setting", "sync_boost",
                         "display_clock_setting")

#: A row fails as ``sm_clock_dip`` when two consecutive SM clock readings during the timed pairs are both more than
#: this fraction below the median of its readings: a slowdown within the row lasting at least one sampling
#: period, whatever reason NVML gave (a threshold the check chooses, not a measured figure). One low reading
#: alone is not enough: at its power cap an H200's clock swings from one 15 Hz reading to the next.
SM_CLOCK_DIP = 0.15


def failing_reasons(reasons: list[str], sm_clocks: list[int]) -> list[str]:
    """The reasons that fail a row: those in :data:`FAILING_REASONS` (and unknown bits), plus ``sm_clock_dip``
    when two consecutive readings of ``sm_clocks`` (in the order read) are both more than :data:`SM_CLOCK_DIP`
    below their median.

    Example: ``failing_reasons(["sw_power_cap"], [1980, 1400, 1980]) == []`` (one low reading);
    ``failing_reasons(["hw_thermal_slowdown"], [1980, 1400, 1390, 1980]) == ["hw_thermal_slowdown", "sm_clock_dip"]``.
    """
    failing = [r for r in reasons if r not in INFORMATIONAL_REASONS]
    if sm_clocks:
        floor = (1 - SM_CLOCK_DIP) * sorted(sm_clocks)[len(sm_clocks) // 2]
        if any(a < floor and b < floor for a, b in zip(sm_clocks, sm_clocks[1:])):
            failing.append("sm_clock_dip")
    return failing


_SAMPLE_KEYS = ("sm_clock_mhz", "mem_clock_mhz", "power_w", "temperature_c", "clock_reasons")


def nvml_device(target: HardwareRecord | str | torch.device) -> NvmlDevice:
    """The NVML view of a hardware record or a device (open it with ``with``).

    Raises:
        ConfigError, DeviceError: ``target`` is a malformed or missing device.
    """
    if isinstance(target, HardwareRecord):
        return NvmlDevice(target.kind, target.uuid)
    dev = resolve_device(target)
    uuid = torch_uuid(dev.index) if dev.type == "cuda" and dev.index is not None else None
    return NvmlDevice(dev.type, uuid)


@dataclass
class TelemetryResult:
    """NVML readings around a block; ``None`` where unsupported or without NVML (see ``notes``).

    Clocks in MHz, power in W, temperature in °C; ``energy_j`` is the difference of NVML's total-energy
    counter across the block; ``duration_s`` the block's host wall-clock time.
    """

    duration_s: float
    sm_clock_mhz_before: int | None = None
    sm_clock_mhz_after: int | None = None
    mem_clock_mhz_before: int | None = None
    mem_clock_mhz_after: int | None = None
    power_w_before: float | None = None
    power_w_after: float | None = None
    temperature_c_before: int | None = None
    temperature_c_after: int | None = None
    clock_reasons_before: list[str] | None = None
    clock_reasons_after: list[str] | None = None
    energy_j: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def average_power_w(self) -> float | None:
        """Energy over duration, where both are known."""
        if self.energy_j is None or self.duration_s <= 0:
            return None
        return self.energy_j / self.duration_s

    def to_dict(self) -> dict[str, Any]:
        """Returns all fields as plain JSON types."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TelemetryResult:
        """Rebuilds a result from :meth:`to_dict` output; unknown keys are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        if "duration_s" not in data:
            raise ConfigError("a telemetry result needs `duration_s`")
        return cls(**{k: v for k, v in data.items() if k in names})


class Telemetry:
    """Reads NVML before and after a block: ``with Telemetry("cuda:0") as tel: ...; tel.result()``.

    On CPU devices, without NVML, or for queries a GPU does not support, the fields are ``None`` and the
    result's notes say why; NVML errors never propagate. Exceptions of the block itself do.

    Args:
        target: A :class:`HardwareRecord` (its ``kind`` and ``uuid`` are used) or a device.

    Raises:
        ConfigError, DeviceError: As :func:`~poptune.measure.hardware.fingerprint`, for a malformed or
            missing device.
    """

    def __init__(self, target: HardwareRecord | str | torch.device) -> None:
        self._gpu = nvml_device(target)
        self._before: dict[str, Any] = {}
        self._start_ns = 0
        self._result: TelemetryResult | None = None

    def __enter__(self) -> Telemetry:
        self._result = None
        self._gpu.__enter__()
        self._before = self._gpu.sample()
        self._start_ns = time.perf_counter_ns()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        duration = (time.perf_counter_ns() - self._start_ns) / 1e9
        try:
            result = TelemetryResult(duration_s=duration, notes=self._gpu.notes)
            if self._gpu.available:
                after = self._gpu.sample()
                for key in _SAMPLE_KEYS:
                    setattr(result, f"{key}_before", self._before[key])
                    setattr(result, f"{key}_after", after[key])
                if self._before["energy_mj"] is not None and after["energy_mj"] is not None:
                    result.energy_j = (after["energy_mj"] - self._before["energy_mj"]) / 1000.0
            self._result = result
        finally:
            self._gpu.__exit__(exc_type, exc, tb)

    def result(self) -> TelemetryResult:
        """Returns the readings of the last finished ``with`` block."""
        if self._result is None:
            raise RuntimeError("Telemetry.result() is only available after the `with` block ends")
        return self._result


def _span(values: list[Any], fn: Any) -> Any:
    known = [v for v in values if v is not None]
    return fn(known) if known else None


class Sampler:
    """Reads an open :class:`~poptune.measure.nvml.NvmlDevice` ``hz`` times a second while blocks run.

    ``with sampler: <timed pairs>``, as often as the row has timed loops (prefill pairs, decode pairs); then
    :meth:`summary` of every window together. The readings are taken on a daemon thread (NVML calls do not
    touch the CUDA stream the work runs on), plus one at the start and one at the end of each window, so even a
    window shorter than the period has two.

    Args:
        gpu: An open NVML view (inside its ``with``); an unavailable one gives a summary with the reason.
        hz: Readings per second, in [10, 20].
    """

    def __init__(self, gpu: NvmlDevice, hz: float = SAMPLE_HZ) -> None:
        if not 10.0 <= hz <= 20.0:
            raise ConfigError(f"`hz` must be in [10, 20], got {hz}")
        self.gpu, self.hz = gpu, hz
        self.samples: list[dict[str, Any]] = []
        self.windows = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start = 0.0
        self._seconds = 0.0

    def _run(self) -> None:
        while not self._stop.wait(1.0 / self.hz):
            self.samples.append(self.gpu.sample())

    def __enter__(self) -> Sampler:
        self._start = time.perf_counter()
        self.windows += 1
        if self.gpu.available:
            self.samples.append(self.gpu.sample())
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="poptune-nvml-sampler", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self.samples.append(self.gpu.sample())
        self._seconds += max(time.perf_counter() - self._start, 0.0)

    def summary(self) -> dict[str, Any]:
        """The row's telemetry over its windows: readings and their rate, SM clock min/max (MHz), memory clock
        min, power mean and max (W), temperature max (°C), the clock event reasons seen other than ``gpu_idle``
        (``clock_reasons``), those that fail the row (``throttle_reasons``, :func:`failing_reasons`) and
        ``throttled`` (any such). Without readings every figure is None and ``reason`` says why."""
        duration = self._seconds
        if not self.samples:
            reason = "; ".join(self.gpu.notes) or "NVML not available"
            return {"samples": 0, "hz": None, "duration_s": duration, "reason": reason}
        column = {key: [s[key] for s in self.samples] for key in _SAMPLE_KEYS}
        seen = sorted({r for reasons in column["clock_reasons"] if reasons for r in reasons} - {"gpu_idle"})
        power = [p for p in column["power_w"] if p is not None]
        failing = failing_reasons(seen, [c for c in column["sm_clock_mhz"] if c is not None])
        periods = len(self.samples) - self.windows  # a window of k readings spans k - 1 periods
        return {
            "samples": len(self.samples),
            "hz": periods / duration if duration > 0 else None,
            "duration_s": duration,
            "sm_clock_mhz_min": _span(column["sm_clock_mhz"], min),
            "sm_clock_mhz_max": _span(column["sm_clock_mhz"], max),
            "mem_clock_mhz_min": _span(column["mem_clock_mhz"], min),
            "power_w_mean": sum(power) / len(power) if power else None,
            "power_w_max": max(power) if power else None,
            "temperature_c_max": _span(column["temperature_c"], max),
            "clock_reasons": seen,
            "throttle_reasons": failing,
            "throttled": bool(failing),
            "reason": None,
        }
