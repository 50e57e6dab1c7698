"""NVML access: a session, the NVML handle of a torch device (matched by UUID), and one reading of it.

NVML (the ``pynvml`` module of nvidia-ml-py) is imported lazily and never allowed to crash a caller: any
``pynvml.NVMLError`` leaves the affected value ``None`` and adds a note saying why. NVML numbers GPUs in
PCI order, not in ``CUDA_VISIBLE_DEVICES`` order, so a torch device is matched to NVML by UUID.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from types import ModuleType, TracebackType
from typing import Any

import torch

__all__ = ["NvmlDevice", "decode_clock_reasons", "find_handle", "note", "nvml_session", "query", "torch_uuid"]

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


def note(notes: list[str], text: str) -> None:
    """Appends ``text`` to ``notes`` once."""
    if text not in notes:
        notes.append(text)


def _norm_uuid(uuid: object) -> str:
    text = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
    text = text.strip().lower()
    return text[4:] if text.startswith("gpu-") else text


def torch_uuid(index: int) -> str | None:
    """The UUID torch reports for CUDA device ``index`` (lower case, no ``GPU-`` prefix), or None."""
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    return None if uuid is None else _norm_uuid(uuid)


@contextlib.contextmanager
def nvml_session(notes: list[str], consequence: str) -> Iterator[ModuleType | None]:
    """Yields the initialised ``pynvml`` module (shut down afterwards), or ``None`` with a note."""
    try:
        import pynvml
    except ImportError:
        note(notes, f"NVML unavailable (nvidia-ml-py not installed): {consequence}")
        yield None
        return
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        note(notes, f"NVML unavailable ({type(e).__name__}): {consequence}")
        yield None
        return
    try:
        yield pynvml
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def query(nv: ModuleType, notes: list[str], what: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Calls one NVML query; on ``NVMLError`` notes why and returns ``None``."""
    try:
        return fn(*args)
    except nv.NVMLError as e:
        note(notes, f"{what} unavailable ({type(e).__name__})")
        return None


def find_handle(nv: ModuleType, uuid: str | None, notes: list[str]) -> tuple[int | None, Any]:
    """Finds the NVML index and handle of the GPU with this UUID (NVML indices follow PCI order)."""
    if not uuid:
        note(notes, "torch reports no UUID for this GPU: NVML fields left empty")
        return None, None
    for k in range(query(nv, notes, "NVML device count", nv.nvmlDeviceGetCount) or 0):
        handle = query(nv, notes, f"NVML device {k}", nv.nvmlDeviceGetHandleByIndex, k)
        found = handle is not None and query(nv, notes, f"NVML device {k} UUID", nv.nvmlDeviceGetUUID, handle)
        if found and _norm_uuid(found) == _norm_uuid(uuid):
            return k, handle
    note(notes, f"no NVML device has UUID {uuid}: NVML fields left empty")
    return None, None


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
    note(notes, f"clock event reasons unavailable ({error})")
    return None


class NvmlDevice:
    """The NVML view of one torch device, open for a ``with`` block: ``with NvmlDevice(kind, uuid) as gpu:``.

    Inside the block :attr:`available` says whether readings can be taken; :meth:`sample` reads clocks, power,
    temperature and clock event reasons, :meth:`energy_mj` the total-energy counter. Where NVML, the GPU or a
    query is missing, the values are ``None`` and :attr:`notes` says why; NVML errors never propagate.

    Args:
        kind: ``"cuda"`` or ``"cpu"`` (a CPU device has no NVML readings).
        uuid: The torch device's UUID (see :func:`torch_uuid`).
    """

    def __init__(self, kind: str, uuid: str | None) -> None:
        self.kind, self.uuid = kind, uuid
        self.notes: list[str] = []
        self._stack = contextlib.ExitStack()
        self._nv: ModuleType | None = None
        self._handle: Any = None

    @property
    def available(self) -> bool:
        """Whether NVML and this GPU's handle are at hand."""
        return self._nv is not None and self._handle is not None

    def __enter__(self) -> NvmlDevice:
        self.notes = []
        if self.kind != "cuda":
            note(self.notes, "CPU device: no NVML telemetry")
            return self
        self._nv = self._stack.enter_context(nvml_session(self.notes, "no GPU telemetry"))
        if self._nv is not None:
            _, self._handle = find_handle(self._nv, self.uuid, self.notes)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            self._stack.close()
        finally:
            self._nv, self._handle = None, None

    def _q(self, what: str, fn_name: str, *args: Any) -> Any:
        nv = self._nv
        if nv is None or not self.available:
            return None
        return query(nv, self.notes, what, getattr(nv, fn_name), self._handle, *args)

    def energy_mj(self) -> int | None:
        """NVML's total-energy counter (mJ since the driver loaded; Volta and newer), or None."""
        return self._q("energy", "nvmlDeviceGetTotalEnergyConsumption")

    def power_w(self) -> float | None:
        """The power draw now (W), or None."""
        milliwatts = self._q("power draw", "nvmlDeviceGetPowerUsage")
        return None if milliwatts is None else milliwatts / 1000.0

    def sample(self) -> dict[str, Any]:
        """One reading: SM and memory clock (MHz), power (W), temperature (°C), clock event reasons, energy (mJ)."""
        nv = self._nv
        if nv is None or not self.available:
            keys = ("sm_clock_mhz", "mem_clock_mhz", "power_w", "temperature_c", "clock_reasons", "energy_mj")
            return dict.fromkeys(keys)
        power = self.power_w()
        return {
            "sm_clock_mhz": self._q("SM clock", "nvmlDeviceGetClockInfo", nv.NVML_CLOCK_SM),
            "mem_clock_mhz": self._q("memory clock", "nvmlDeviceGetClockInfo", nv.NVML_CLOCK_MEM),
            "power_w": power,
            "temperature_c": self._q("temperature", "nvmlDeviceGetTemperature", nv.NVML_TEMPERATURE_GPU),
            "clock_reasons": _clock_reasons(nv, self._handle, self.notes),
            "energy_mj": self.energy_mj(),
        }
