"""The skipped block's own K/V from one product (poptune.kv.block_kv): used, and equal to the per-layer write.

The independent reference (every layer's K/V by hand, whole and chunked) is ``tests/engine/test_block.py``; here the
product is compared with the per-layer path it replaces, on models whose norm weights are random, so that a norm
weight not folded (or folded as ``w`` where Gemma scales by ``1 + w``) shows.
"""

from __future__ import annotations

import sys

import pytest
import torch

import poptune.kv.block_kv as block_kv
import poptune.kv.project as project
from poptune import PopConfig, apply_pop
from poptune.engine import decoder_of
from poptune.engine.segments import prefill_prompt
from tests.engine.test_block import _deep_tiny

MODELS = ("tiny-llama", "tiny-qwen3", "tiny-gemma3")


@pytest.fixture(scope="module", params=MODELS)
def deep(request):
    return _deep_tiny(request.param)


def _prefill(model, config, chunk, monkeypatch, fused=True):
    """POP's cache and logits of one prompt, with the product or without; and how each layer was written."""
    from transformers import DynamicCache

    counts = {"per_layer": 0, "product": 0}
    per_layer, write = project.write_prompt_kv, block_kv.BlockKV.write

    def count_per_layer(*args, **kwargs):
        counts["per_layer"] += 1
        return per_layer(*args, **kwargs)

    def count_product(self, *args):
        done = write(self, *args)
        counts["product"] += done
        return done

    with monkeypatch.context() as patched:
        patched.setattr(project, "write_prompt_kv", count_per_layer)
        patched.setattr(block_kv.BlockKV, "write", count_product)
        if not fused:
            patched.setattr(block_kv, "plan", lambda *args: None)
        ids = torch.randint(5, 250, (2, 40), generator=torch.Generator().manual_seed(1))
        mask = torch.ones_like(ids)
        mask[1, :3] = 0  # a left-padded row
        cache = DynamicCache(config=model.config.get_text_config())
        with apply_pop(model, config), torch.no_grad():
            out = prefill_prompt(model, {"input_ids": ids, "attention_mask": mask}, chunk=chunk, cache=cache)
    return out, counts


def _assert_same(a, b, rtol=1e-5, atol=1e-6):
    torch.testing.assert_close(a.logits, b.logits, rtol=rtol, atol=atol)
    for i, (x, y) in enumerate(zip(a.cache.layers, b.cache.layers)):
        torch.testing.assert_close(x.keys, y.keys, rtol=rtol, atol=atol, msg=f"keys of layer {i}")
        torch.testing.assert_close(x.values, y.values, rtol=rtol, atol=atol, msg=f"values of layer {i}")


@pytest.mark.parametrize("chunk", [None, 16], ids=["whole", "chunked"])
@pytest.mark.parametrize("boundary", ["last", "window-4"])
def test_the_product_is_used_and_equals_the_per_layer_write(deep, boundary, chunk, monkeypatch):
    config = PopConfig(skip=6, boundary=boundary)
    segments = 1 if chunk is None else 3  # (0, 16), (16, 32), (32, 40)
    fused, used = _prefill(deep, config, chunk, monkeypatch)
    plain, per_layer = _prefill(deep, config, chunk, monkeypatch, fused=False)
    assert used == {"per_layer": 0, "product": 6 * segments}
    assert per_layer == {"per_layer": 6 * segments, "product": 0}
    _assert_same(fused, plain)


def test_a_norm_weight_not_folded_is_caught(deep, monkeypatch):
    """The same comparison fails when the product leaves the layers' input-norm weights out (the model's norm weights
    are random: its layers differ)."""
    config = PopConfig(skip=6)
    plain, _ = _prefill(deep, config, None, monkeypatch, fused=False)
    with monkeypatch.context() as patched:
        patched.setattr(block_kv, "norm_scale", lambda norm: torch.ones_like(norm.weight, dtype=torch.float32))
        patched.setattr(block_kv, "_FOLDED", type(block_kv._FOLDED)())  # fold afresh, without the weights
        unfolded, used = _prefill(deep, config, None, monkeypatch)
    assert used["product"] == 6
    with pytest.raises(AssertionError):
        _assert_same(unfolded, plain)
    folded, _ = _prefill(deep, config, None, monkeypatch)  # the folds remade: the parameters are the same, the
    _assert_same(folded, plain)  # cache under another key was dropped with the patch


def test_folds_are_remade_when_a_weight_changes(deep, monkeypatch):
    config = PopConfig(skip=6)
    _prefill(deep, config, None, monkeypatch)
    norm = decoder_of(deep).layers[4].input_layernorm.weight
    saved = norm.detach().clone()
    try:
        with torch.no_grad():
            norm.mul_(1.5)  # in place: the same tensor, a new version
        fused, _ = _prefill(deep, config, None, monkeypatch)
        plain, _ = _prefill(deep, config, None, monkeypatch, fused=False)
        _assert_same(fused, plain)
    finally:
        with torch.no_grad():
            norm.copy_(saved)


def test_layers_after_a_gap_are_written_per_layer(deep, monkeypatch):
    """``layers=(2, 3, 5)``: layer 4 runs in full between, so layer 5 sees another state than the block entry."""
    config = PopConfig(skip=3, layers=(2, 3, 5))
    fused, used = _prefill(deep, config, None, monkeypatch)
    plain, _ = _prefill(deep, config, None, monkeypatch, fused=False)
    assert used == {"per_layer": 1, "product": 2}
    _assert_same(fused, plain)


def test_one_rotary_embedding_per_group_of_the_keys_only(deep, monkeypatch):
    """The model's RoPE is called once per group of layers that share cos/sin (Gemma-3: local and global), with an
    empty query: the keys are not rotated twice."""
    decoder = decoder_of(deep)
    module = sys.modules[type(decoder.layers[0].self_attn).__module__]
    rope, calls = module.apply_rotary_pos_emb, []

    def spy(q, k, cos, sin, *args, **kwargs):
        calls.append((q.shape[1], k.shape[1]))
        return rope(q, k, cos, sin, *args, **kwargs)

    config = PopConfig(skip=6, boundary="none")  # no boundary: no layer runs attention, only the K/V writes
    monkeypatch.setattr(module, "apply_rotary_pos_emb", spy)
    _prefill(deep, config, None, monkeypatch)
    types = getattr(decoder.config, "layer_types", None)
    per_type = getattr(decoder.rotary_emb, "layer_types", None)
    skipped = config.skipped_layers(len(decoder.layers))
    groups = len({types[i] for i in skipped}) if per_type else 1
    heads = decoder.layers[0].self_attn.k_proj.out_features // decoder.layers[0].self_attn.head_dim
    kept = len(decoder.layers) - 6  # the layers before the block: their attention's calls come first
    assert len(calls) == kept + groups
    assert all(q == 0 for q, _ in calls[kept:])
    assert sum(k for _, k in calls[kept:]) == 6 * heads
    calls.clear()
    _prefill(deep, config, None, monkeypatch, fused=False)  # the per-layer path: one call per layer, keys only
    assert calls[kept:] == [(0, heads)] * 6


def test_unknown_norms_are_not_fused(deep, monkeypatch):
    layers = decoder_of(deep).layers
    assert block_kv.plan(decoder_of(deep), range(2, 8)) is not None
    monkeypatch.setattr(layers[5], "input_layernorm", torch.nn.LayerNorm(layers[5].input_layernorm.weight.shape))
    assert block_kv.plan(decoder_of(deep), range(2, 8)) is None
    assert block_kv.plan(decoder_of(deep), range(7, 8)) is None  # one layer: nothing to batch
