"""Fixed costs the timed POP call must not carry (issue 47, 7): the left-padding check reads the mask on the host
(a device sync) once per input, not at every prefill; Gemma-3's sliding-window sizes are made on the device once,
not copied host-to-device by every new cache. On CPU there is no sync or copy to see: the tests count the calls
and the tensors that would make them."""

from __future__ import annotations

import pytest
import torch

import poptune.engine.pop as engine
from poptune import PopConfig, load_model
from poptune.measure.prefill import prefill
from poptune.measure.timing_prompts import prompt_batch
from poptune.measure.windows import window_sizes_on_device


def test_the_padding_check_reads_each_mask_once(monkeypatch: pytest.MonkeyPatch) -> None:
    model, tok = load_model("tiny-llama")
    reads: list[int] = []
    real = engine._right_padded_rows
    monkeypatch.setattr(engine, "_right_padded_rows", lambda new: reads.append(1) or real(new))
    inputs, other = prompt_batch(tok, 24, 2), prompt_batch(tok, 24, 2)
    with torch.inference_mode():
        for _ in range(4):  # a warm-up and timed calls of one input
            prefill(model, inputs, PopConfig(skip=3))
        assert len(reads) == 1
        prefill(model, other, PopConfig(skip=3))  # a new input is checked
        assert len(reads) == 2
        bad = {**inputs, "attention_mask": inputs["attention_mask"].clone()}
        bad["attention_mask"][0, -1] = 0
        for _ in range(2):  # a refused mask is refused every time
            with pytest.raises(Exception, match="left-padded"):
                prefill(model, bad, PopConfig(skip=3))


def test_sliding_window_sizes_are_made_on_the_device_once_while_timing() -> None:
    model, tok = load_model("tiny-gemma3")
    inputs = prompt_batch(tok, 24, 1)
    with torch.inference_mode():
        with window_sizes_on_device(model) as made:
            assert list(made) == [(8, torch.device("cpu"))]  # made on entry, before any timed call
            caches = [prefill(model, inputs, side).cache for side in (PopConfig(skip=3), None, None)]
        outside = prefill(model, inputs, None).cache
    sliding = [[layer for layer in c.layers if getattr(layer, "is_sliding", False)] for c in caches]
    assert sliding[0] and all(layer._sliding_window_tensor is made[(8, torch.device("cpu"))]
                              for layers in sliding for layer in layers)
    assert all(layer._sliding_window_tensor is not made[(8, torch.device("cpu"))]
               for layer in outside.layers if getattr(layer, "is_sliding", False))  # transformers' own again
