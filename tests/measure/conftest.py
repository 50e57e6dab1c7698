"""Fakes of CUDA and NVML for the measurement tests: torch sees one H200, second of two GPUs in PCI order."""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pynvml
import pytest
import torch

UUID_A100 = "11111111-aaaa-bbbb-cccc-000000000001"
UUID_H200 = "22222222-aaaa-bbbb-cccc-000000000002"


class FakeNVML(types.ModuleType):
    """A stand-in ``pynvml`` with GPUs in PCI order; names in ``unsupported`` raise NotSupported."""

    def __init__(self, gpus: list[dict], unsupported: tuple[str, ...] = (), init_error: type | None = None):
        super().__init__("pynvml")
        for name in dir(pynvml):
            if name.startswith(("NVMLError", "NVML_")):
                setattr(self, name, getattr(pynvml, name))
        self.gpus, self.unsupported, self.init_error = gpus, set(unsupported), init_error
        self.inits = self.shutdowns = 0
        self.energy_mj = 1_000_000

    def _check(self, name: str) -> None:
        if name in self.unsupported:
            raise pynvml.NVMLError_NotSupported()

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise self.init_error()
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, k: int) -> dict:
        return self.gpus[k]

    def nvmlDeviceGetUUID(self, h: dict) -> bytes:
        return ("GPU-" + h["uuid"]).encode()  # nvidia-ml-py returns bytes here

    def nvmlSystemGetDriverVersion(self) -> str:
        return "570.86.15"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12080

    def nvmlDeviceGetMaxClockInfo(self, h: dict, kind: int) -> int:
        return h["max_sm"] if kind == pynvml.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetEnforcedPowerLimit(self, h: dict) -> int:
        return h["limit_mw"]

    def nvmlDeviceGetClockInfo(self, h: dict, kind: int) -> int:
        return 1755 if kind == pynvml.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetPowerUsage(self, h: dict) -> int:
        return 350_500

    def nvmlDeviceGetTemperature(self, h: dict, sensor: int) -> int:
        return 41

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: dict) -> int:
        self._check("nvmlDeviceGetCurrentClocksEventReasons")
        return 0x4

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: dict) -> int:
        return 0x1

    def nvmlDeviceGetTotalEnergyConsumption(self, h: dict) -> int:
        self._check("nvmlDeviceGetTotalEnergyConsumption")
        self.energy_mj += 5500
        return self.energy_mj


GPUS = [
    {"uuid": UUID_A100, "max_sm": 1410, "limit_mw": 400_000},
    {"uuid": UUID_H200, "max_sm": 1980, "limit_mw": 700_000},
]


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """Torch sees one GPU (as with CUDA_VISIBLE_DEVICES=1): the H200, second in PCI order."""
    props = SimpleNamespace(name="NVIDIA H200", total_memory=150 * 2**30, major=9, minor=0,
                            multi_processor_count=132, uuid=UUID_H200)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)


@pytest.fixture
def install_nvml(monkeypatch: pytest.MonkeyPatch):
    """Installs a :class:`FakeNVML` as ``pynvml``: ``install_nvml(gpus=1, unsupported=(...), init_error=...)``
    keeps the first ``gpus`` of the two fake GPUs and returns the fake."""

    def install(gpus: int = 2, unsupported: tuple[str, ...] = (), init_error: type | None = None) -> FakeNVML:
        nv = FakeNVML(GPUS[:gpus], unsupported=unsupported, init_error=init_error)
        monkeypatch.setitem(sys.modules, "pynvml", nv)
        return nv

    return install
