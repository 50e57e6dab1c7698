"""Tests of hardware fingerprints and telemetry: the real CPU, and CUDA/NVML through fakes."""

from __future__ import annotations

import re

import pynvml
import pytest
import torch

from poptune.errors import ConfigError, DeviceError
from poptune.measure import HardwareRecord, Telemetry, decode_clock_reasons, fingerprint

UUID_H200 = "22222222-aaaa-bbbb-cccc-000000000002"  # the fake GPU torch sees (conftest.py)


def test_real_cpu_fingerprint() -> None:
    rec = fingerprint("cpu")
    assert rec.kind == "cpu" and rec.name
    assert rec.logical_threads and rec.logical_threads >= 1
    assert re.fullmatch(r"cpu-[a-z0-9-]+-\d+t", rec.hardware_id)
    assert rec.torch_version == torch.__version__ and rec.python_version and rec.platform
    assert rec.torch_num_threads == torch.get_num_threads()
    assert HardwareRecord.from_json(rec.to_json()) == rec


def test_hardware_record_needs_its_required_fields() -> None:
    with pytest.raises(ConfigError, match="`hardware_id`"):
        HardwareRecord.from_dict({"kind": "cpu", "name": "x", "torch_version": "2", "python_version": "3",
                                  "platform": "p"})


def test_decode_clock_reasons() -> None:
    assert decode_clock_reasons(0) == []
    assert decode_clock_reasons(0x24) == ["sw_power_cap", "sw_thermal_slowdown"]
    assert decode_clock_reasons(0x1001) == ["gpu_idle", "unknown_0x1000"]


def test_fingerprint_matches_torch_device_to_nvml_by_uuid(monkeypatch: pytest.MonkeyPatch, fake_cuda: None,
                                                          install_nvml) -> None:
    nv = install_nvml()
    rec = fingerprint("cuda")
    assert (rec.kind, rec.cuda_index, rec.nvml_index) == ("cuda", 0, 1)
    assert rec.uuid == UUID_H200 and rec.hardware_id == "nvidia-h200"
    assert rec.sm_clock_max_mhz == 1980 and rec.power_limit_w == 700.0
    assert rec.compute_capability == "9.0" and rec.multiprocessors == 132
    assert (rec.driver_version, rec.cuda_driver_version) == ("570.86.15", "12.8")
    assert rec.notes == []
    assert nv.inits == nv.shutdowns == 1
    assert HardwareRecord.from_dict(rec.to_dict()) == rec


@pytest.mark.parametrize("error", [pynvml.NVMLError_LibraryNotFound, pynvml.NVMLError_DriverNotLoaded])
def test_nvml_init_failure_never_raises(monkeypatch: pytest.MonkeyPatch, fake_cuda: None, install_nvml,
                                        error: type) -> None:
    nv = install_nvml(init_error=error)
    rec = fingerprint("cuda:0")
    assert rec.name == "NVIDIA H200" and rec.nvml_index is None and rec.power_limit_w is None
    assert any(f"NVML unavailable ({error.__name__})" in n for n in rec.notes)
    with Telemetry(rec) as tel:
        pass
    res = tel.result()
    assert res.sm_clock_mhz_before is None and res.energy_j is None
    assert any(error.__name__ in n for n in res.notes)
    assert nv.shutdowns == 0


def test_unsupported_queries_leave_fields_empty(monkeypatch: pytest.MonkeyPatch, fake_cuda: None, install_nvml) -> None:
    unsupported = ("nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetCurrentClocksEventReasons")
    nv = install_nvml(unsupported=unsupported)
    with Telemetry("cuda:0") as tel:
        pass
    res = tel.result()
    assert res.energy_j is None and res.average_power_w is None
    assert "energy unavailable (NVMLError_NotSupported)" in res.notes
    assert res.sm_clock_mhz_before == 1755 and res.power_w_after == pytest.approx(350.5)
    assert res.clock_reasons_after == ["gpu_idle"]  # fell back to the older throttle-reasons call
    assert nv.inits == nv.shutdowns == 1


def test_telemetry_reads_energy_and_reasons(monkeypatch: pytest.MonkeyPatch, fake_cuda: None, install_nvml) -> None:
    nv = install_nvml()
    with Telemetry(fingerprint("cuda:0")) as tel:
        pass
    res = tel.result()
    assert res.energy_j == pytest.approx(5.5)
    assert res.clock_reasons_before == res.clock_reasons_after == ["sw_power_cap"]
    assert (res.mem_clock_mhz_after, res.temperature_c_after) == (2619, 41)
    assert res.notes == []
    assert nv.inits == nv.shutdowns == 2  # once for the fingerprint, once for the block


def test_telemetry_without_a_matching_uuid(monkeypatch: pytest.MonkeyPatch, fake_cuda: None, install_nvml) -> None:
    install_nvml(gpus=1)
    with Telemetry("cuda") as tel:
        pass
    assert tel.result().power_w_before is None
    assert any("no NVML device has UUID" in n for n in tel.result().notes)


def test_telemetry_on_cpu_returns_none_fields() -> None:
    tel = Telemetry("cpu")
    with pytest.raises(RuntimeError):
        tel.result()
    with tel:
        sum(range(1000))
    res = tel.result()
    assert res.duration_s >= 0 and res.energy_j is None and res.sm_clock_mhz_after is None
    assert res.notes == ["CPU device: no NVML telemetry"]
    assert type(res).from_dict(res.to_dict()) == res


def test_telemetry_lets_block_errors_through_and_shuts_nvml_down(
    monkeypatch: pytest.MonkeyPatch, fake_cuda: None, install_nvml
) -> None:
    nv = install_nvml()
    with pytest.raises(ValueError), Telemetry("cuda:0"):
        raise ValueError("boom")
    assert nv.inits == nv.shutdowns == 1


def test_fingerprint_cuda_without_cuda_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(DeviceError):
        fingerprint("cuda")


def test_cpu_hardware_id_counts_the_threads_torch_uses():
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = fingerprint("cpu").hardware_id
        torch.set_num_threads(2)
        two = fingerprint("cpu").hardware_id
    finally:
        torch.set_num_threads(before)
    assert one.endswith("-1t") and two.endswith("-2t") and one[:-3] == two[:-3]
