"""Preflight: package versions, CUDA present, NVML matched to the torch device by UUID, the energy counter
advancing during a 1-second matmul, clocks readable. The first failure stops the check with one line.

The version lines need no import of the packages they check (package metadata only), so they run, and say
what is missing, where importing transformers would fail: transformers imports ``regex`` at import, and the
statistics call ``scipy.stats.bootstrap(rng=...)``, which needs scipy 1.15.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import torch

from poptune.measure import NvmlDevice, fingerprint, nvml_device

__all__ = ["Check", "REQUIREMENTS", "preflight", "version_checks"]

#: What the check needs that a device's preinstalled packages may lack: package, least version, why.
REQUIREMENTS: tuple[tuple[str, str | None, str], ...] = (
    ("regex", None, "transformers imports it at import"),
    ("scipy", "1.15", "scipy.stats.bootstrap(rng=...)"),
    ("transformers", "5.20", "the model classes and cache API poptune uses"),
)


@dataclass(frozen=True)
class Check:
    """One line of the summary: ``status`` is PASS, FAIL or SKIP."""

    name: str
    status: str
    detail: str

    def line(self) -> str:
        return f"{self.status} {self.name}: {self.detail}"


def _release(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text.split("+")[0])[:3])


def version_checks(requirements: tuple[tuple[str, str | None, str], ...] = REQUIREMENTS) -> list[Check]:
    """One line per required package: PASS with its version, FAIL when missing or older than needed."""
    checks = []
    for package, least, why in requirements:
        try:
            found = metadata.version(package)
        except metadata.PackageNotFoundError:
            checks.append(Check(package, "FAIL", f"not installed (needed: {why})"))
            continue
        if least is not None and _release(found) < _release(least):
            checks.append(Check(package, "FAIL", f"{found} < {least} (needed: {why})"))
        else:
            checks.append(Check(package, "PASS", f"{found}" + (f" (>= {least})" if least else "")))
    return checks


def _busy_energy(gpu: NvmlDevice, device: torch.device, seconds: float) -> tuple[float | None, float]:
    """Joules NVML counts during ``seconds`` of back-to-back bf16 matmuls, and the seconds they took."""
    a = torch.randn(4096, 4096, device=device, dtype=torch.bfloat16)
    torch.cuda.synchronize(device)
    before, start = gpu.energy_mj(), time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(20):
            a @ a  # (4096, 4096): about 0.14 TFLOP per product
        torch.cuda.synchronize(device)
    elapsed, after = time.perf_counter() - start, gpu.energy_mj()
    return (None if before is None or after is None else (after - before) / 1000.0), elapsed


def _nvml_checks(gpu: NvmlDevice, device: torch.device) -> list[Check]:
    if not gpu.available:
        return [Check("nvml", "FAIL", "; ".join(gpu.notes) or "NVML not available")]
    checks = [Check("nvml", "PASS", f"NVML handle matched to {device} by UUID {gpu.uuid}")]
    joules, seconds = _busy_energy(gpu, device, 1.0)
    if joules is None or joules <= 0:
        checks.append(Check("energy", "FAIL", f"energy counter did not advance in {seconds:.2f} s of matmul "
                                              f"({'; '.join(gpu.notes) or 'read 0'})"))
        return checks
    checks.append(Check("energy", "PASS", f"{joules:.1f} J in {seconds:.2f} s of matmul ({joules / seconds:.0f} W)"))
    sample = gpu.sample()
    if sample["sm_clock_mhz"] is None or sample["mem_clock_mhz"] is None:
        checks.append(Check("clocks", "FAIL", "; ".join(gpu.notes) or "clocks unreadable"))
    else:
        checks.append(Check("clocks", "PASS", f"SM {sample['sm_clock_mhz']} MHz, memory {sample['mem_clock_mhz']} MHz, "
                                              f"reasons {sample['clock_reasons']}"))
    return checks


def preflight(device: torch.device, *, tiny: bool) -> tuple[list[Check], dict[str, Any] | None]:
    """The preflight checks and the hardware record; on CPU (``--tiny`` only) each is skipped with the reason."""
    if device.type != "cuda":
        if not tiny:
            return [Check("cuda", "FAIL", "CUDA is not available: the full check needs one GPU (or pass --tiny)")], None
        reason = f"{device} device: no CUDA, no NVML"
        return [Check(name, "SKIP", reason) for name in ("cuda", "nvml", "energy", "clocks")], fingerprint(device).to_dict()
    hardware = fingerprint(device)
    checks = [Check("cuda", "PASS", f"{hardware.name}, {hardware.memory_bytes / 2**30:.0f} GiB, driver "
                                    f"{hardware.driver_version}, torch {torch.__version__} (CUDA {torch.version.cuda})")]
    with nvml_device(hardware) as gpu:
        checks += _nvml_checks(gpu, device)
    return checks, hardware.to_dict()
