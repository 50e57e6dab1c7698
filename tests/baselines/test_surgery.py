"""Layer removal keeps cache indices and attention types right; sparse weights are swapped in and out."""

from __future__ import annotations

import copy

import pytest
import torch

from poptune import ConfigError, load_model
from poptune.baselines import LayerRemoval, SparseWeights
from poptune.engine import decoder_of

PROMPT = "The quick brown fox jumps over the lazy dog, again and again."  # crosses tiny-gemma3's window of 8


def make_identity(layer: torch.nn.Module) -> None:
    """Zero the two residual branches' output projections: the layer then returns its input exactly."""
    with torch.no_grad():
        layer.self_attn.o_proj.weight.zero_()
        layer.mlp.down_proj.weight.zero_()


def _generate(model, tok, steps=20):
    inputs = tok([PROMPT], return_tensors="pt")
    out = model.generate(**inputs, max_new_tokens=steps, do_sample=False, min_new_tokens=steps)
    return out[0, inputs["input_ids"].shape[1]:].tolist()


@pytest.mark.parametrize("name", ["tiny-gemma3", "tiny-llama", "tiny-qwen3"])
def test_removed_layers_generate_like_identity_layers(name):
    model, tok = load_model(name)
    removed = (1, 3)  # tiny-gemma3: layer 1 sliding, 3 sliding; the kept 5 (global) moves to index 3
    identity = copy.deepcopy(model)
    for i in removed:
        make_identity(decoder_of(identity).layers[i])
    expected = _generate(identity, tok)
    transform = LayerRemoval(removed=removed)
    with transform.applied(model):
        decoder = decoder_of(model)
        assert len(decoder.layers) == 4 and decoder.config.num_hidden_layers == 4
        assert [layer.self_attn.layer_idx for layer in decoder.layers] == [0, 1, 2, 3]
        got = _generate(model, tok)
    assert got == expected
    assert len(expected) == 20  # the generation ran well past the sliding window


def test_removal_keeps_each_layer_attention_type():
    model, _ = load_model("tiny-gemma3")
    decoder = decoder_of(model)
    types = list(decoder.config.layer_types)
    with LayerRemoval(removed=(0, 2)).applied(model):
        assert decoder.config.layer_types == [types[i] for i in (1, 3, 4, 5)]
        assert [layer.self_attn.is_sliding for layer in decoder.layers] == [t == "sliding_attention"
                                                                           for t in decoder.config.layer_types]
    assert decoder.config.layer_types == types and len(decoder.layers) == 6
    assert [layer.self_attn.layer_idx for layer in decoder.layers] == list(range(6))


def test_removal_is_undone_after_an_error():
    model, tok = load_model("tiny-llama")
    before = model(**tok([PROMPT], return_tensors="pt")).logits
    with pytest.raises(RuntimeError):
        with LayerRemoval(removed=(2,)).applied(model):
            raise RuntimeError("boom")
    torch.testing.assert_close(model(**tok([PROMPT], return_tensors="pt")).logits, before, rtol=0, atol=0)


def test_removal_validation():
    model, _ = load_model("tiny-llama")
    with pytest.raises(ConfigError, match="distinct"):
        LayerRemoval(removed=(3, 1))
    with pytest.raises(ConfigError, match="cannot remove"):
        with LayerRemoval(removed=(6,)).applied(model):
            pass
    with pytest.raises(ConfigError, match="cannot remove"):
        with LayerRemoval(removed=tuple(range(6))).applied(model):
            pass


def test_sparse_weights_swap_in_and_out():
    model, tok = load_model("tiny-llama")
    name = "model.layers.0.mlp.down_proj.weight"
    original = dict(model.named_parameters())[name].detach().clone()
    zeros = torch.zeros_like(original)
    inputs = tok([PROMPT], return_tensors="pt")
    before = model(**inputs).logits
    with SparseWeights(weights={name: zeros}, sparsity=1.0).applied(model):
        assert torch.equal(dict(model.named_parameters())[name], zeros)
        assert not torch.equal(model(**inputs).logits, before)
    assert torch.equal(dict(model.named_parameters())[name], original)
