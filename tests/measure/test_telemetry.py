"""Per-row NVML sampling and energy blocks, through the fake NVML of conftest.py (the real ones: test_cuda.py)."""

from __future__ import annotations

import time

import pytest

from poptune.errors import ConfigError
from poptune.measure import NvmlDevice, Sampler, Timer, energy_per_call

UUID_H200 = "22222222-aaaa-bbbb-cccc-000000000002"  # the fake GPU (conftest.py)


def test_sampler_reads_10_to_20_times_a_second_and_sums_a_row_up(install_nvml) -> None:
    install_nvml()
    with NvmlDevice("cuda", UUID_H200) as gpu, Sampler(gpu, hz=20) as sampler:
        time.sleep(0.5)
    summary = sampler.summary()
    assert 2 + 5 <= summary["samples"] <= 2 + 11  # start, end, and ~10 in between (a loaded CI host lags)
    assert summary["sm_clock_mhz_min"] == summary["sm_clock_mhz_max"] == 1755
    assert summary["power_w_max"] == pytest.approx(350.5) and summary["temperature_c_max"] == 41
    assert summary["clock_reasons"] == ["sw_power_cap"] and summary["throttled"] is True
    assert summary["reason"] is None


def test_sampler_without_nvml_says_why(install_nvml) -> None:
    install_nvml(gpus=1)  # no GPU with this UUID
    with NvmlDevice("cuda", UUID_H200) as gpu, Sampler(gpu) as sampler:
        pass
    summary = sampler.summary()
    assert summary["samples"] == 0 and "no NVML device has UUID" in summary["reason"]
    with NvmlDevice("cpu", None) as cpu, Sampler(cpu) as sampler:
        pass
    assert sampler.summary()["reason"] == "CPU device: no NVML telemetry"
    with pytest.raises(ConfigError, match=r"`hz` must be in \[10, 20\]"):
        Sampler(cpu, hz=50)


def test_energy_block_lasts_a_second_and_divides_by_its_calls(install_nvml) -> None:
    install_nvml()  # the fake counter advances 5.5 J at every read
    calls = []
    with NvmlDevice("cuda", UUID_H200) as gpu:
        reading = energy_per_call(lambda: calls.append(time.sleep(0.05)), gpu=gpu, timer=Timer("cpu"))
    assert reading.seconds >= 1.0 and reading.calls == len(calls) >= 2
    assert reading.joules == pytest.approx(5.5)  # one read after the step the block starts on
    assert reading.j_per_call == pytest.approx(5.5 / len(calls)) and reading.reason is None


def test_energy_block_is_null_with_a_reason_where_it_cannot_be_measured(install_nvml) -> None:
    ran = []
    with NvmlDevice("cpu", None) as cpu:
        reading = energy_per_call(lambda: ran.append(1), gpu=cpu, timer=Timer("cpu"))
    assert reading.j_per_call is None and reading.reason == "CPU device: no NVML telemetry" and not ran
    install_nvml(unsupported=("nvmlDeviceGetTotalEnergyConsumption",))
    with NvmlDevice("cuda", UUID_H200) as gpu:
        reading = energy_per_call(lambda: ran.append(1), gpu=gpu, timer=Timer("cpu"))
        off = energy_per_call(lambda: ran.append(1), gpu=gpu, timer=Timer("cpu"), min_seconds=0)
    assert reading.j_per_call is None and "energy unavailable (NVMLError_NotSupported)" in reading.reason
    assert off.reason == "energy blocks off (energy_seconds=0)" and not ran
    with pytest.raises(ConfigError, match=r"`energy_seconds` must be 0 \(off\) or >= 1"):
        energy_per_call(lambda: None, gpu=gpu, timer=Timer("cpu"), min_seconds=0.2)
