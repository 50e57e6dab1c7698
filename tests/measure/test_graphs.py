"""CUDA-graph timing on CPU, with fakes: POP's forward makes no host sync while capturing, an unpadded text
prompt is captured without a mask (SDPA's causal path, not a dense square), and a failed capture is ended and
hands the caching allocator back (a fake CUDA graph stands for torch's)."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import torch

import poptune.measure.graphs as graphs
from poptune import PopConfig, load_model
from poptune.measure.flops import assumption, prefill_flops
from poptune.measure.graphs import capture, graph_inputs, mask_materialised
from poptune.measure.prefill import prefill
from poptune.measure.timing_prompts import prompt_batch


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-llama")


def _no_sync(self: Any, *args: Any) -> Any:
    raise RuntimeError("device-to-host sync while the stream is capturing")


@pytest.fixture
def capturing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fake capturing stream: torch (and transformers, which asks torch) say a capture is under way, and a
    tensor read on the host raises, as the CUDA driver makes it fail during a real capture."""
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    monkeypatch.setattr(torch.Tensor, "__bool__", _no_sync)
    monkeypatch.setattr(torch.Tensor, "item", _no_sync)


@pytest.fixture
def prompts(tiny) -> tuple[dict, dict]:
    """A batch of unpadded prompts with its all-ones mask, and as a graph captures it (made before capture)."""
    inputs = prompt_batch(tiny[1], 24, 2)
    return inputs, graph_inputs(inputs)


def test_pop_prefill_makes_no_host_sync_while_capturing(tiny, prompts, capturing) -> None:
    model, _ = tiny
    with torch.inference_mode():
        for prompt in prompts:
            out = prefill(model, prompt, PopConfig(skip=3))
            assert out.logits.shape[:2] == (2, 1)


def test_right_padding_is_still_refused_outside_capture(tiny) -> None:
    model, tok = tiny
    inputs = prompt_batch(tok, 24, 1)
    inputs["attention_mask"][0, -1] = 0
    with torch.inference_mode(), pytest.raises(Exception, match="left-padded"):
        prefill(model, inputs, PopConfig(skip=3))


def test_graph_inputs_drop_only_an_all_ones_mask_of_a_text_prompt(tiny) -> None:
    _, tok = tiny
    inputs = prompt_batch(tok, 16, 2)
    assert set(graph_inputs(inputs)) == {"input_ids"} and not mask_materialised(graph_inputs(inputs))
    padded = {**inputs, "attention_mask": inputs["attention_mask"].clone()}
    padded["attention_mask"][1, 0] = 0  # left padding: the mask is needed
    assert graph_inputs(padded)["attention_mask"] is padded["attention_mask"] and mask_materialised(padded)
    image = {**inputs, "pixel_values": torch.zeros(1, 3)}
    assert "attention_mask" in graph_inputs(image)  # image prompts keep the model's own masks


def _sdpa_masks(model: Any, inputs: dict, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    seen: list[Any] = []
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(*args: Any, **kwargs: Any) -> torch.Tensor:
        seen.append(kwargs.get("attn_mask"))
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    with torch.inference_mode():
        prefill(model, inputs, None)
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", real)
    return seen


def test_captured_unpadded_prompt_takes_sdpas_causal_path(tiny, monkeypatch: pytest.MonkeyPatch) -> None:
    model, tok = tiny
    assert model.config._attn_implementation == "sdpa"
    inputs = prompt_batch(tok, 24, 2)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    dense = _sdpa_masks(model, inputs, monkeypatch)
    assert dense and all(m is not None and m.shape[-2:] == (24, 24) for m in dense)  # what capture would build
    assert all(m is None for m in _sdpa_masks(model, graph_inputs(inputs), monkeypatch))  # causal path


def test_the_ideal_counts_a_materialised_mask_as_the_whole_square(tiny) -> None:
    config = tiny[0].config
    causal = prefill_flops(config, 64, attention="sdpa")
    square = prefill_flops(config, 64, attention="sdpa", materialised=True)
    assert square > causal and square == prefill_flops(config, 64, attention="eager")
    assert "CUDA graphs" in assumption("sdpa", graphs=True) and "CUDA graphs" not in assumption("sdpa")


class _FakeGraph:
    """A CUDA graph (a fake: no CUDA here) whose capture fails as torch 2.13's does: ``capture_end`` raises on an
    invalidated capture before it records that the capture ended, so ``pool()``, which checks that, raises."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def capture_begin(self, pool: Any = None, capture_error_mode: str = "global") -> None:
        self.log.append(f"begin {capture_error_mode} pool={pool}")

    def capture_end(self) -> None:
        self.log.append("end")
        raise RuntimeError("CUDA error: operation failed due to a previous error during capture")

    def pool(self) -> tuple[int, int]:
        self.log.append("pool() asked")
        raise RuntimeError("Called CUDAGraph::pool() without a preceding successful capture.")

    def replay(self) -> None:
        raise AssertionError("a failed capture is never replayed")


def test_a_failed_capture_is_ended_and_hands_the_allocator_back(monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 47 (2): the pool is made before capture_begin(pool=...) and released by that handle; graph.pool()
    # is never asked after a failed capture_end (torch raises there, and the pool would stay held).
    log: list[str] = []
    fake = type("FakeStream", (), {"wait_stream": lambda self, other: None})
    monkeypatch.setattr(torch.cuda, "Stream", lambda device: fake())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: fake())
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: log.append("sync"))
    monkeypatch.setattr(torch.cuda, "CUDAGraph", lambda: _FakeGraph(log))
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: log.append("handle") or (0, 9))
    monkeypatch.setattr(torch._C, "_cuda_endAllocateToPool", lambda i, p: log.append(f"allocator back {i} {p}"),
                        raising=False)
    monkeypatch.setattr(torch._C, "_cuda_releasePool", lambda i, p: log.append(f"pool released {i} {p}"),
                        raising=False)
    calls = []

    def fn() -> None:
        calls.append(1)
        if len(calls) > graphs._WARMUP:  # eager warm-up works; the captured call syncs on the host
            raise RuntimeError("operation not permitted when stream is capturing")

    result = capture(fn, torch.device("cuda", 0))
    assert result.graph is None and result.call is fn and result.mode == "eager"
    assert "operation not permitted when stream is capturing" in result.reason  # fn's error, not capture_end's
    after = log[log.index("handle"):]
    assert after == ["handle", "begin thread_local pool=(0, 9)", "end", "allocator back 0 (0, 9)",
                     "pool released 0 (0, 9)", "sync"]


def test_a_capture_whose_end_succeeds_leaves_the_pool_to_its_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    # fn raised, but capture_end made a graph: the graph releases its pool when freed, so releasing it here
    # too would release it twice (a fake CUDA graph, as above).
    log: list[str] = []
    fake = type("FakeStream", (), {"wait_stream": lambda self, other: None})
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: (0, 9))
    monkeypatch.setattr(torch._C, "_cuda_releasePool", lambda i, p: log.append("released"), raising=False)
    graph = _FakeGraph(log)
    graph.capture_end = lambda: log.append("end")  # type: ignore[method-assign]  # this test's fake end
    error = graphs._record(graph, lambda: 1 / 0, fake(), torch.device("cuda", 0))
    assert isinstance(error, ZeroDivisionError) and "released" not in log and "pool() asked" not in log


def test_capture_on_cpu_says_why_it_is_eager() -> None:
    result = capture(lambda: None, torch.device("cpu"))
    assert result.mode == "eager" and "CUDA device" in result.reason


def test_the_mask_label_says_what_sdpa_received_under_capture_not_what_was_asked(tiny, monkeypatch) -> None:
    """Issue 59 (4): the label reads what SDPA was given while the (fake) capture ran. Inputs without a mask on a
    transformers that still builds the square under capture (simulated: the mask put back) read ``materialised``."""
    model, tok = tiny
    inputs = prompt_batch(tok, 24, 2)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    with torch.inference_mode(), graphs.sdpa_calls() as seen:
        prefill(model, graph_inputs(inputs), PopConfig(skip=2))
    # the block's causal prefill, and the boundary token's single query through the deep layers (no mask needed)
    assert set(seen) == {"causal", "full"} and graphs.mask_label(seen, graph_inputs(inputs)) == "none (causal path)"
    with torch.inference_mode(), graphs.sdpa_calls() as seen:
        prefill(model, inputs, None)  # the dense square a capturing transformers builds from a mask
    assert "mask" in seen and graphs.mask_label(seen, graph_inputs(inputs)) == "materialised"
    assert graphs.mask_label((), inputs) == "materialised" and graphs.mask_label((), graph_inputs(inputs)) == \
        "none (causal path)"  # no SDPA call recorded (another attention): the inputs decide, as before
    assert torch.nn.functional.scaled_dot_product_attention.__name__ == "scaled_dot_product_attention"  # restored
