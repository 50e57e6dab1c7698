"""The CUDA and NVML paths on a real GPU (marked ``cuda``; skipped without one, run by a GPU session).

Run there with ``python -m pytest -m cuda tests/measure/test_cuda.py``.
"""

from __future__ import annotations

import time

import pytest
import torch

from poptune import PopConfig, load_model
from poptune.measure import Sampler, Timer, energy_per_call, nvml_device
from poptune.measure.bench import BenchSpec, run_bench
from poptune.measure.prefill import prefill
from poptune.measure.prompts import prompt_batch
from poptune.measure.timer import RepeatPolicy

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def _sleep_ms(cycles: int) -> float:
    """Host milliseconds of one ``torch.cuda._sleep(cycles)``, the device synchronised around it."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    torch.cuda._sleep(cycles)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3


def test_cuda_event_timer_times_a_known_sleep_kernel() -> None:
    timer = Timer("cuda")
    cycles = 50_000_000  # a spin of this many GPU clock cycles: tens of ms at 1-2 GHz
    host = min(_sleep_ms(cycles) for _ in range(3))
    one, two = timer.read([timer.time_call(lambda: torch.cuda._sleep(cycles)),
                           timer.time_call(lambda: torch.cuda._sleep(2 * cycles))])
    assert host > 5.0  # long enough that launch overhead is noise
    assert one == pytest.approx(host, rel=0.1)  # events time the kernel the host waited for
    assert two == pytest.approx(2 * one, rel=0.1)  # and twice the spin takes twice as long


def test_nvml_energy_and_telemetry_on_the_gpu() -> None:
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    with nvml_device("cuda") as gpu:
        assert gpu.available, gpu.notes
        with Sampler(gpu) as sampler:
            reading = energy_per_call(lambda: a @ a, gpu=gpu, timer=Timer("cuda"), min_seconds=1.0)
    summary = sampler.summary()
    assert 10 <= summary["samples"] / summary["duration_s"] <= 22
    assert summary["sm_clock_mhz_max"] > 0 and summary["power_w_max"] > 0
    assert reading.seconds >= 1.0 and reading.calls > 1
    assert reading.j_per_call > 0 and 20 < reading.watts < 2000, reading


@pytest.mark.parametrize("name", ["tiny-gemma3", "tiny-llama"])
def test_engine_on_cuda_equals_cpu(name: str) -> None:
    cpu_model, tok = load_model(name, device="cpu", dtype="float32")
    gpu_model, _ = load_model(name, device="cuda", dtype="float32")
    inputs = prompt_batch(tok, 40, 2)
    with torch.inference_mode():
        for config in (None, PopConfig(skip=3)):
            cpu = prefill(cpu_model, inputs, config).logits
            gpu = prefill(gpu_model, {k: v.cuda() for k, v in inputs.items()}, config).logits
            torch.testing.assert_close(gpu.cpu(), cpu, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("graphs", [False, True])
def test_bench_end_to_end_on_cuda(graphs: bool) -> None:
    model, tok = load_model("tiny-llama", device="cuda")
    spec = BenchSpec(lengths=(64,), batch_size=2, decode_tokens=2, graphs=graphs, energy_seconds=1.0,
                     policy=RepeatPolicy(warmup=1, min_repeats=5, min_seconds=0.2))
    result = run_bench(model, tok, PopConfig(skip=3), spec, model_name="tiny-llama")
    (row,) = result.rows
    figures = row.summary()
    assert result.hardware.kind == "cuda" and result.hardware.nvml_index is not None
    assert figures["energy_pop_j"] > 0 and figures["energy_full_j"] > 0 and figures["energy_reason"] is None
    assert row.telemetry["samples"] >= 2 and figures["sm_clock_mhz_max"] > 0
    assert figures["timing"] == ("cuda-graph" if graphs else "eager"), row.timing
    assert row.prefill.a.count >= 5 and row.decode is not None
