"""Per-row NVML sampling and energy blocks, through the fake NVML of conftest.py (the real ones: test_cuda.py)."""

from __future__ import annotations

import time

import pytest

from poptune.errors import ConfigError
from poptune.measure import NvmlDevice, Sampler, Timer, energy_per_call
from poptune.measure.telemetry import FAILING_REASONS, INFORMATIONAL_REASONS, failing_reasons
from poptune.measure.timer import RepeatPolicy, measure, measure_pair

UUID_H200 = "22222222-aaaa-bbbb-cccc-000000000002"  # the fake GPU (conftest.py)


def test_sampler_reads_10_to_20_times_a_second_and_sums_a_row_up(install_nvml) -> None:
    install_nvml()
    with NvmlDevice("cuda", UUID_H200) as gpu, Sampler(gpu, hz=20) as sampler:
        time.sleep(0.5)
    summary = sampler.summary()
    assert 2 + 5 <= summary["samples"] <= 2 + 11  # start, end, and ~10 in between (a loaded CI host lags)
    assert summary["sm_clock_mhz_min"] == summary["sm_clock_mhz_max"] == 1755
    assert summary["power_w_max"] == pytest.approx(350.5) and summary["temperature_c_max"] == 41
    assert summary["clock_reasons"] == ["sw_power_cap"]  # recorded: the power cap is normal at full load
    assert summary["throttle_reasons"] == [] and summary["throttled"] is False
    assert summary["reason"] is None


@pytest.mark.parametrize(("reasons", "clocks", "failing"), [
    (["sw_power_cap"], [1980, 1900, 1755, 1980], []),  # the governor holding power: not a failure
    (["sw_power_cap", "sync_boost", "applications_clocks_setting"], [1980], []),
    (["hw_thermal_slowdown"], [1980, 1980], ["hw_thermal_slowdown"]),
    (["sw_thermal_slowdown", "hw_slowdown"], [1980], ["sw_thermal_slowdown", "hw_slowdown"]),
    (["hw_power_brake_slowdown"], [1980], ["hw_power_brake_slowdown"]),
    (["unknown_0x400"], [1980], ["unknown_0x400"]),  # a bit this code does not know is not waved through
    ([], [1980, 1980, 1400, 1390, 1980], ["sm_clock_dip"]),  # two readings 29% under the median: a dip
    (["sw_power_cap"], [1980, 1400, 1980, 1380, 1980], []),  # lone low readings: the power cap's swing (issue 47)
    (["sw_power_cap"], [1980, 1980, 1700, 1980], []),  # 14% under: within the power cap's range
])
def test_failing_reasons_split_thermal_and_dips_from_the_power_cap(reasons, clocks, failing) -> None:
    assert failing_reasons(reasons, clocks) == failing
    assert set(INFORMATIONAL_REASONS).isdisjoint(FAILING_REASONS) and "sw_power_cap" in INFORMATIONAL_REASONS


def test_sampler_covers_the_timed_pairs_not_the_warm_up() -> None:
    calls: list[str] = []

    class Gpu:  # an open NVML view whose readings note how many calls had run
        available, notes = True, []

        def sample(self) -> dict:
            return {"sm_clock_mhz": 1980, "mem_clock_mhz": 2619, "power_w": 500.0, "temperature_c": 50,
                    "clock_reasons": ["hw_thermal_slowdown"] if len(calls) < 6 else [], "calls": len(calls),
                    "energy_mj": 0}

    sampler = Sampler(Gpu())
    policy = RepeatPolicy(warmup=3, min_repeats=4, min_seconds=0.0)
    pair = measure_pair(lambda: calls.append("a"), lambda: calls.append("b"), timer=Timer("cpu"), policy=policy,
                        during=sampler)
    assert pair.count == 4 and len(calls) == 2 * (3 + 4)
    assert sampler.samples[0]["calls"] == 6 and sampler.samples[-1]["calls"] == 14  # after the 3 warm-up pairs
    measure(lambda: calls.append("c"), timer=Timer("cpu"), policy=RepeatPolicy(warmup=2, min_repeats=2,
                                                                              min_seconds=0.0), during=sampler)
    summary = sampler.summary()
    seen = [s["calls"] for s in sampler.samples]
    assert sampler.windows == 2 and all(6 <= c <= 14 or 16 <= c <= 18 for c in seen) and 16 in seen  # no warm-up
    assert summary["throttled"] is False  # the slowdown came during the warm-up only


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
    assert reading.seconds >= 1.0 and reading.calls == len(calls) - 1 >= 2  # the busy lead-in is not counted
    assert reading.joules == pytest.approx(11.0)  # from the step it starts on to the step that ends it
    assert reading.j_per_call == pytest.approx(11.0 / reading.calls) and reading.reason is None


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
