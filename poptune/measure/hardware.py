"""Hardware fingerprints: what a latency was measured on.

GPU fields come from torch and NVML (:mod:`poptune.measure.nvml`, matched to the torch device by UUID); an NVML
error leaves its fields ``None`` with a note. Telemetry during work is :mod:`poptune.measure.telemetry`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import torch

from poptune.device import resolve_device
from poptune.errors import ConfigError
from poptune.measure.nvml import find_handle, nvml_session, query, torch_uuid

__all__ = ["HardwareRecord", "fingerprint"]


def _slug(text: str) -> str:
    text = re.sub(r"\((r|tm|c)\)", "", text.lower())
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-") or "unknown"


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


def _fill_from_nvml(nv: ModuleType, rec: HardwareRecord) -> None:
    rec.nvml_index, handle = find_handle(nv, rec.uuid, rec.notes)
    driver = query(nv, rec.notes, "driver version", nv.nvmlSystemGetDriverVersion)
    rec.driver_version = driver.decode() if isinstance(driver, bytes) else driver
    cuda = query(nv, rec.notes, "CUDA driver version", nv.nvmlSystemGetCudaDriverVersion)
    rec.cuda_driver_version = None if cuda is None else f"{cuda // 1000}.{cuda % 1000 // 10}"
    if handle is None:
        return

    def q(what: str, fn: Any, *args: Any) -> Any:
        return query(nv, rec.notes, what, fn, handle, *args)

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
        cuda_index=dev.index, uuid=torch_uuid(dev.index), compute_capability=f"{props.major}.{props.minor}",
        multiprocessors=props.multi_processor_count, cuda_runtime_version=torch.version.cuda, **common,
    )
    with nvml_session(rec.notes, "fields from torch only") as nv:
        if nv is not None:
            _fill_from_nvml(nv, rec)
    return rec
