"""Hardware fingerprints (what a latency was measured on) and NVML telemetry around a block of work.

NVML (the ``pynvml`` module of nvidia-ml-py) is imported lazily and never allowed to crash a caller: any
``pynvml.NVMLError`` leaves the affected fields ``None`` and adds a note saying why. NVML numbers GPUs in
PCI order, not in ``CUDA_VISIBLE_DEVICES`` order, so a torch device is matched to NVML by UUID.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import platform
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import ModuleType, TracebackType
from typing import Any

import torch

from poptune.errors import ConfigError
from poptune.device import resolve_device

__all__ = ["HardwareRecord", "Telemetry", "TelemetryResult", "decode_clock_reasons", "fingerprint"]

# NVML's nvmlClocksEventReason* bits (named nvmlClocksThrottleReason* before driver 535).
_CLOCK_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def decode_clock_reasons(mask: int) -> list[str]:
    """Names the bits of an NVML clock event (throttle) reason mask; ``0`` gives ``[]``.

    Example: ``decode_clock_reasons(0x24) == ["sw_power_cap", "sw_thermal_slowdown"]``.
    """
    names = [name for bit, name in _CLOCK_REASONS.items() if mask & bit]
    rest = mask & ~sum(_CLOCK_REASONS)
    return names + ([f"unknown_{rest:#x}"] if rest else [])


def _slug(text: str) -> str:
    text = re.sub(r"\((r|tm|c)\)", "", text.lower())
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-") or "unknown"


def _note(notes: list[str], text: str) -> None:
    if text not in notes:
        notes.append(text)


def _norm_uuid(uuid: object) -> str:
    text = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
    text = text.strip().lower()
    return text[4:] if text.startswith("gpu-") else text


@dataclass
class HardwareRecord:
    """What a measurement ran on; JSON-serialisable. Fields that could not be read are ``None``.

    Attributes:
        kind: ``"cuda"`` or ``"cpu"``.
        name: GPU name, or the CPU model for CPU devices.
        hardware_id: Short slug of ``[a-z0-9-]``, e.g. ``nvidia-h200`` or ``cpu-intel-xeon-processor-2t``
            (a CPU's id ends with the number of threads torch uses).
        memory_bytes: Memory of the measured device (GPU memory for CUDA, system RAM for CPU).
        cpu_model, physical_cores, logical_threads, torch_num_threads: The host CPU (filled for both kinds).
        cuda_index: The torch device index; ``nvml_index`` the matching NVML (PCI-order) index.
        power_limit_w: Enforced power limit; ``sm_clock_max_mhz``/``mem_clock_max_mhz`` the maximum clocks.
        notes: Why fields are missing, e.g. ``"NVML unavailable (NVMLError_LibraryNotFound): ..."``.
    """

    kind: str
    name: str
    hardware_id: str
    torch_version: str
    python_version: str
    platform: str
    memory_bytes: int | None = None
    cpu_model: str | None = None
    physical_cores: int | None = None
    logical_threads: int | None = None
    torch_num_threads: int | None = None
    cuda_index: int | None = None
    nvml_index: int | None = None
    uuid: str | None = None
    compute_capability: str | None = None
    multiprocessors: int | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    cuda_runtime_version: str | None = None
    sm_clock_max_mhz: int | None = None
    mem_clock_max_mhz: int | None = None
    power_limit_w: float | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Returns all fields as plain JSON types."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HardwareRecord:
        """Rebuilds a record from :meth:`to_dict` output; unknown keys are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        missing = [f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING and f.name not in data]
        if missing:
            raise ConfigError(f"a hardware record needs {', '.join(f'`{m}`' for m in missing)}")
        return cls(**{k: v for k, v in data.items() if k in names})

    def to_json(self, indent: int | None = None) -> str:
        """Serialises :meth:`to_dict` to JSON."""
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str) -> HardwareRecord:
        """Parses :meth:`to_json` output."""
        return cls.from_dict(json.loads(text))


def _cpu_info() -> dict[str, Any]:
    """The host CPU model, core and thread counts and RAM.

    Cores and RAM come from psutil (portable); the model name from Linux ``/proc/cpuinfo``, else ``platform``
    (psutil does not report it, and py-cpuinfo spends about a second probing for one string). The thread count
    stays ``os.cpu_count()``: it is part of the hardware id, so the id of an existing study does not change.
    """
    import psutil

    model = None
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            models = re.findall(r"^model name\s*:\s*(.+)$", f.read(), re.M)
        model = models[0].strip() if models else None
    except OSError:
        pass
    return {
        "cpu_model": model or platform.processor() or platform.machine() or None,
        "physical_cores": psutil.cpu_count(logical=False),
        "logical_threads": os.cpu_count(),
        "memory_bytes": int(psutil.virtual_memory().total),
    }


@contextlib.contextmanager
def _nvml_session(notes: list[str], consequence: str) -> Iterator[ModuleType | None]:
    """Yields the initialised ``pynvml`` module (shut down afterwards), or ``None`` with a note."""
    try:
        import pynvml
    except ImportError:
        _note(notes, f"NVML unavailable (nvidia-ml-py not installed): {consequence}")
        yield None
        return
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        _note(notes, f"NVML unavailable ({type(e).__name__}): {consequence}")
        yield None
        return
    try:
        yield pynvml
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def _query(nv: ModuleType, notes: list[str], what: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Calls one NVML query; on ``NVMLError`` notes why and returns ``None``."""
    try:
        return fn(*args)
    except nv.NVMLError as e:
        _note(notes, f"{what} unavailable ({type(e).__name__})")
        return None


def _find_handle(nv: ModuleType, uuid: str | None, notes: list[str]) -> tuple[int | None, Any]:
    """Finds the NVML index and handle of the GPU with this UUID (NVML indices follow PCI order)."""
    if not uuid:
        _note(notes, "torch reports no UUID for this GPU: NVML fields left empty")
        return None, None
    for k in range(_query(nv, notes, "NVML device count", nv.nvmlDeviceGetCount) or 0):
        handle = _query(nv, notes, f"NVML device {k}", nv.nvmlDeviceGetHandleByIndex, k)
        found = handle is not None and _query(nv, notes, f"NVML device {k} UUID", nv.nvmlDeviceGetUUID, handle)
        if found and _norm_uuid(found) == _norm_uuid(uuid):
            return k, handle
    _note(notes, f"no NVML device has UUID {uuid}: NVML fields left empty")
    return None, None


def _torch_uuid(index: int) -> str | None:
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    return None if uuid is None else _norm_uuid(uuid)


def _fill_from_nvml(nv: ModuleType, rec: HardwareRecord) -> None:
    rec.nvml_index, handle = _find_handle(nv, rec.uuid, rec.notes)
    driver = _query(nv, rec.notes, "driver version", nv.nvmlSystemGetDriverVersion)
    rec.driver_version = driver.decode() if isinstance(driver, bytes) else driver
    cuda = _query(nv, rec.notes, "CUDA driver version", nv.nvmlSystemGetCudaDriverVersion)
    rec.cuda_driver_version = None if cuda is None else f"{cuda // 1000}.{cuda % 1000 // 10}"
    if handle is None:
        return
    q = lambda what, fn, *args: _query(nv, rec.notes, what, fn, handle, *args)  # noqa: E731
    rec.sm_clock_max_mhz = q("max SM clock", nv.nvmlDeviceGetMaxClockInfo, nv.NVML_CLOCK_SM)
    rec.mem_clock_max_mhz = q("max memory clock", nv.nvmlDeviceGetMaxClockInfo, nv.NVML_CLOCK_MEM)
    limit = q("power limit", nv.nvmlDeviceGetEnforcedPowerLimit)
    rec.power_limit_w = None if limit is None else limit / 1000.0


def fingerprint(device: str | torch.device) -> HardwareRecord:
    """Describes the hardware behind ``device``; never fails on NVML errors (it notes them instead).

    Raises:
        ConfigError: ``device`` is malformed or not CPU/CUDA.
        DeviceError: CUDA is asked for but not available.
    """
    dev = resolve_device(device)
    cpu = _cpu_info()
    common: dict[str, Any] = {
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "cpu_model": cpu["cpu_model"],
        "physical_cores": cpu["physical_cores"],
        "logical_threads": cpu["logical_threads"],
        "torch_num_threads": torch.get_num_threads(),
    }
    if dev.type == "cpu":
        model = cpu["cpu_model"] or "unknown"
        # The threads torch uses, not those the CPU has: one thread and two are not the same machine to a timer.
        hardware_id = f"cpu-{_slug(model)}-{torch.get_num_threads()}t"
        return HardwareRecord(kind="cpu", name=model, hardware_id=hardware_id, memory_bytes=cpu["memory_bytes"],
                              notes=["CPU device: NVML not queried"], **common)
    assert dev.index is not None  # resolve_device gives CUDA an index
    props = torch.cuda.get_device_properties(dev.index)
    rec = HardwareRecord(
        kind="cuda", name=props.name, hardware_id=_slug(props.name), memory_bytes=props.total_memory,
        cuda_index=dev.index, uuid=_torch_uuid(dev.index), compute_capability=f"{props.major}.{props.minor}",
        multiprocessors=props.multi_processor_count, cuda_runtime_version=torch.version.cuda, **common,
    )
    with _nvml_session(rec.notes, "fields from torch only") as nv:
        if nv is not None:
            _fill_from_nvml(nv, rec)
    return rec


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


def _clock_reasons(nv: ModuleType, handle: Any, notes: list[str]) -> list[str] | None:
    error = "not in this pynvml"
    for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
        fn = getattr(nv, name, None)
        if fn is None:
            continue
        try:
            return decode_clock_reasons(fn(handle))
        except nv.NVMLError as e:  # the older name may still work on an older driver
            error = type(e).__name__
    _note(notes, f"clock event reasons unavailable ({error})")
    return None


def _sample(nv: ModuleType, handle: Any, notes: list[str]) -> dict[str, Any]:
    q = lambda what, fn, *args: _query(nv, notes, what, fn, handle, *args)  # noqa: E731
    power = q("power draw", nv.nvmlDeviceGetPowerUsage)
    return {
        "sm_clock_mhz": q("SM clock", nv.nvmlDeviceGetClockInfo, nv.NVML_CLOCK_SM),
        "mem_clock_mhz": q("memory clock", nv.nvmlDeviceGetClockInfo, nv.NVML_CLOCK_MEM),
        "power_w": None if power is None else power / 1000.0,
        "temperature_c": q("temperature", nv.nvmlDeviceGetTemperature, nv.NVML_TEMPERATURE_GPU),
        "clock_reasons": _clock_reasons(nv, handle, notes),
        "energy_mj": q("energy", nv.nvmlDeviceGetTotalEnergyConsumption),
    }


class Telemetry:
    """Samples NVML before and after a block: ``with Telemetry("cuda:0") as tel: ...; tel.result()``.

    On CPU devices, without NVML, or for queries a GPU does not support, the fields are ``None`` and the
    result's notes say why; NVML errors never propagate. Exceptions of the block itself do.

    Args:
        target: A :class:`HardwareRecord` (its ``kind`` and ``uuid`` are used) or a device.

    Raises:
        ConfigError, DeviceError: As :func:`fingerprint`, for a malformed or missing device.
    """

    def __init__(self, target: HardwareRecord | str | torch.device) -> None:
        if isinstance(target, HardwareRecord):
            self._kind, self._uuid = target.kind, target.uuid
        else:
            dev = resolve_device(target)
            self._kind = dev.type
            self._uuid = _torch_uuid(dev.index) if dev.type == "cuda" and dev.index is not None else None
        self._notes: list[str] = []
        self._stack = contextlib.ExitStack()
        self._nv: ModuleType | None = None
        self._handle: Any = None
        self._before: dict[str, Any] = {}
        self._start_ns = 0
        self._result: TelemetryResult | None = None

    def __enter__(self) -> Telemetry:
        self._notes, self._result = [], None
        if self._kind != "cuda":
            _note(self._notes, "CPU device: no NVML telemetry")
        else:
            self._nv = self._stack.enter_context(_nvml_session(self._notes, "no GPU telemetry"))
            if self._nv is not None:
                _, self._handle = _find_handle(self._nv, self._uuid, self._notes)
            if self._handle is not None:
                self._before = _sample(self._nv, self._handle, self._notes)
        self._start_ns = time.perf_counter_ns()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        duration = (time.perf_counter_ns() - self._start_ns) / 1e9
        try:
            result = TelemetryResult(duration_s=duration, notes=self._notes)
            if self._nv is not None and self._handle is not None:
                after = _sample(self._nv, self._handle, self._notes)
                for key in ("sm_clock_mhz", "mem_clock_mhz", "power_w", "temperature_c", "clock_reasons"):
                    setattr(result, f"{key}_before", self._before[key])
                    setattr(result, f"{key}_after", after[key])
                if self._before["energy_mj"] is not None and after["energy_mj"] is not None:
                    result.energy_j = (after["energy_mj"] - self._before["energy_mj"]) / 1000.0
            self._result = result
        finally:
            self._stack.close()
            self._nv, self._handle = None, None

    def result(self) -> TelemetryResult:
        """Returns the readings of the last finished ``with`` block."""
        if self._result is None:
            raise RuntimeError("Telemetry.result() is only available after the `with` block ends")
        return self._result
