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
from poptune.measure.timer import RepeatPolicy
from poptune.measure.timing_prompts import prompt_batch

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def _timed_sleep(timer: Timer, cycles: int) -> tuple[float, float]:
    """One ``torch.cuda._sleep(cycles)`` (a kernel spinning that many GPU clock cycles) timed two ways at once:
    CUDA events (ms) and the host clock with the device synchronised around it (ms)."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    pending = timer.time_call(lambda: torch.cuda._sleep(cycles))
    torch.cuda.synchronize()
    host = (time.perf_counter() - start) * 1e3
    (events,) = timer.read([pending])
    return events, host


def test_cuda_event_timer_times_a_known_sleep_kernel() -> None:
    timer = Timer("cuda")
    cycles = 20_000_000  # ~10 ms at 2 GHz, ~60 ms at an idle clock: long enough that launch overhead is noise
    rounds = [(_timed_sleep(timer, cycles), _timed_sleep(timer, 2 * cycles)) for _ in range(5)]
    for (one, host_one), (two, host_two) in rounds:
        assert 0.9 * host_one <= one <= host_one * 1.001  # the events time the kernel the host waited for
        assert 0.9 * host_two <= two <= host_two * 1.001
    ratios = sorted(two / one for (one, _), (two, _) in rounds)
    assert ratios[2] == pytest.approx(2.0, rel=0.1)  # twice the spin takes twice as long (median of 5 pairs)


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
    assert figures["timing"] == ("cuda-graph" if graphs else "eager"), row.timing  # POP captures too
    assert row.timing["mask"] == ("none (causal path)" if graphs else None), row.timing  # what SDPA received (issue 59)
    assert row.prefill.a.count >= 5 and row.decode is not None
    assert result.spec.policy.warmup_seconds >= 1.0  # a GPU warms up a second at the timed shape
    assert 0 < figures["idle_w"] < 2000 and len(row.energy["pop"]["blocks"]) == 3  # three alternated blocks
    assert figures["energy_pop_net_j"] < figures["energy_pop_j"]  # net of idle power, beside the gross figure
    torch.cuda.empty_cache()  # the allocator is not left mid-capture


def test_a_failed_capture_leaves_the_allocator_usable() -> None:
    from poptune.measure.graphs import capture

    x = torch.ones(1 << 16, device="cuda")
    failed = capture(lambda: (x * 2).sum().item(), torch.device("cuda"))  # a host sync: capture must fail
    assert failed.mode == "eager" and "capture failed" in failed.reason
    torch.cuda.empty_cache()  # raised an internal assert when the allocator was left mid-capture
    assert torch.empty(1 << 20, device="cuda").numel() == 1 << 20
    graphed = capture(lambda: x * 2, torch.device("cuda"))
    assert graphed.mode == "cuda-graph", graphed.reason
    graphed.call()
    torch.cuda.synchronize()


def test_stacked_decode_on_cuda_equals_each_configurations_generate() -> None:
    """The shared-trunk study's decode (every configuration in one stacked batch) on the GPU gives, token for token,
    what each configuration's own ``generate`` gives. float64, so that a kernel chosen by batch shape cannot flip an
    argmax of the random tiny model: a difference is the code's, not the rounding's."""
    from poptune import apply_pop
    from poptune.engine.joint import generate_together
    from poptune.engine.segments import generate

    model, tok = load_model("tiny-llama", device="cuda", dtype="float32")
    model = model.to(torch.float64)
    texts = ["a much longer prompt than the other one, " * 6, "short prompt", "a third prompt of middling length " * 2]
    inputs = {k: v.cuda() for k, v in tok(texts, return_tensors="pt", padding=True).items()}
    configs = [PopConfig(skip=0), PopConfig(skip=3), PopConfig(skip=2, boundary="window-4", offset=1),
               PopConfig(skip=3, boundary="window-8", kv="anchor")]
    kwargs = {"do_sample": False, "max_new_tokens": 10, "pad_token_id": 0}
    with torch.inference_mode():
        together = generate_together(model, inputs, configs, **kwargs)
        for config, out in zip(configs, together, strict=True):
            with apply_pop(model, config):
                assert torch.equal(out, generate(model, inputs, **kwargs)), config


def test_peers_raced_together_on_cuda_equal_each_configurations_own_answers() -> None:
    """A batch of a study's trials (``poptune study --batch``) on the GPU: the full model's states recorded once,
    the first configuration to score a batch scores it for its peers (replayed prefills, stacked decode), and
    every configuration's answers are its own ``generate``'s, token for token (float64, as above)."""
    from poptune import apply_pop
    from poptune.engine.prefix import PrefixStates
    from poptune.engine.trunk import SharedTrunk
    from poptune.evaluate.synthetic import passkey_items, run_synthetic

    model, tok = load_model("tiny-llama", device="cuda", dtype="float32")
    model = model.to(torch.float64)
    items = passkey_items(tok, lengths=(260, 300), depths=(0.0, 0.5, 1.0), seed=3)
    configs = [PopConfig(skip=3), PopConfig(skip=2, boundary="window-4", offset=1), PopConfig(skip=1, boundary="none")]

    def answers(config: PopConfig) -> list[str]:
        with apply_pop(model, config):
            return [r["output"] for r in run_synthetic(model, tok, items, batch_size=4, max_new_tokens=6).records]

    with torch.inference_mode():
        alone = {c: answers(c) for c in configs}
        states, trunk = PrefixStates(max_bytes=1 << 30), SharedTrunk(configs, peers=True)
        with states.attached(model):
            answers(PopConfig(skip=0))  # records the full model's layer inputs
            with trunk.attached(model):
                together = {c: answers(c) for c in configs}
    assert together == alone
    assert trunk.together == trunk.led > 0 and trunk.served == trunk.led * (len(configs) - 1)
    assert states.replayed > 0
