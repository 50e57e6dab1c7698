"""POP's patches compose with forwards already set on the model: an instance forward, accelerate's hooks."""

from __future__ import annotations

import pytest
import torch

from poptune import PopConfig, PoptuneError, apply_pop, load_model, remove_pop
from poptune.engine import decoder_of
from poptune.measure.timing_prompts import prompt_batch
from poptune.patching import Patch

CONFIG = PopConfig(skip=3, boundary="window-4")


def _pop_logits(model, inputs):
    with apply_pop(model, CONFIG), torch.no_grad():
        return model(**inputs).logits


def test_an_instance_forward_keeps_running_and_is_restored():
    model, tok = load_model("tiny-gemma3")
    inputs = prompt_batch(tok, 20, 2)
    expected = _pop_logits(model, inputs)
    decoder = decoder_of(model)
    last = decoder.layers[-1]  # a skipped layer
    calls = {"decoder": 0, "layer": 0}

    def counting(module, key):
        inner = module.forward

        def forward(*args, **kwargs):
            calls[key] += 1
            return inner(*args, **kwargs)

        return forward

    decoder.forward, last.forward = counting(decoder, "decoder"), counting(last, "layer")
    mine = (decoder.forward, last.forward)
    torch.testing.assert_close(_pop_logits(model, inputs), expected, rtol=0, atol=0)
    assert calls == {"decoder": 1, "layer": 1}  # the layer's own forward ran for the boundary tokens
    assert (vars(decoder)["forward"], vars(last)["forward"]) == mine


def test_accelerate_device_map_hooks_with_an_offloaded_layer(tmp_path):
    """accelerate's hooks on every block (one skipped layer's weights on disk, loaded only inside its hook)."""
    accelerate = pytest.importorskip("accelerate")

    model, tok = load_model("tiny-gemma3")
    inputs = prompt_batch(tok, 20, 2)
    with torch.no_grad():
        full = model(**inputs).logits[:, -4:]
    expected = _pop_logits(model, inputs)
    decoder = decoder_of(model)
    device_map = {f"model.{name}": "cpu" for name, _ in decoder.named_children() if name != "layers"}
    device_map.update({f"model.layers.{i}": "cpu" for i in range(len(decoder.layers))}, lm_head="cpu")
    device_map["model.layers.4"] = "disk"
    accelerate.dispatch_model(model, device_map=device_map, offload_dir=str(tmp_path), force_hooks=True)
    layer = decoder.layers[4]
    assert layer.self_attn.k_proj.weight.device.type == "meta"  # loaded by the hook for each forward
    hooked = (layer.forward, layer._old_forward)
    torch.testing.assert_close(_pop_logits(model, inputs), expected, rtol=1e-5, atol=1e-6)
    assert (layer.forward, layer._old_forward) == hooked
    with torch.no_grad():
        torch.testing.assert_close(model(**inputs).logits[:, -4:], full, rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=3, do_sample=False)  # decode through the hooks, POP removed
    assert out.shape[1] == inputs["input_ids"].shape[1] + 3


def test_a_forward_replaced_after_pop_is_not_undone_silently():
    model, _ = load_model("tiny-llama")
    apply_pop(model, CONFIG)
    decoder = decoder_of(model)
    decoder.forward = lambda *args, **kwargs: None  # someone else's, set after POP
    with pytest.raises(PoptuneError, match="was replaced after POP patched it"):
        remove_pop(model)


def test_patch_undo_restores_the_class_forward():
    module = torch.nn.Linear(2, 2)
    patch = Patch(module, lambda inner: lambda x: inner(x) * 2)
    x = torch.ones(1, 2)
    assert torch.equal(module(x), torch.nn.Linear.forward(module, x) * 2)
    patch.undo()
    assert "forward" not in vars(module)
