"""The skipped block: every skipped layer's K/V by hand, and each attention implementation's masks."""

from __future__ import annotations

import pytest
import torch

from poptune import PopConfig, UnsupportedModelError, apply_pop, load_model
from poptune.engine import decoder_of
from poptune.measure.timing_prompts import prompt_batch
from poptune.models.configs import tiny_config, tiny_names

DEPTH = 8  # deep enough for skip=6 with a retained layer before the block


def _deep_tiny(name: str) -> torch.nn.Module:
    """``name``'s tiny architecture with DEPTH layers and random (not unit) norm weights, so that a layer using
    another layer's norm, or none, shows."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

    config = tiny_config(name)
    text = config.get("text_config", config)
    text["num_hidden_layers"] = DEPTH
    if "layer_types" in text:  # Gemma-3: every third layer global, as the tiny config's pattern
        text["layer_types"] = ["full_attention" if i % 3 == 2 else "sliding_attention" for i in range(DEPTH)]
    auto = AutoModelForImageTextToText if "vision_config" in config else AutoModelForCausalLM
    torch.manual_seed(0)
    model = auto.from_config(AutoConfig.for_model(config.pop("model_type"), **config)).eval()
    with torch.no_grad():
        for name_, param in model.named_parameters():
            if "norm" in name_:
                param.normal_(0.0, 0.5)
    return model


def _rms(norm: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    eps = getattr(norm, "eps", None) or norm.variance_epsilon
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    gemma = type(norm).__name__.startswith("Gemma")
    return y * (1.0 + norm.weight) if gemma else y * norm.weight  # Gemma scales by (1 + w)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos.unsqueeze(1) + rotated * sin.unsqueeze(1)  # (B, H, N, D)


def _by_hand(layer: torch.nn.Module, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """k = RoPE(k_norm(W_K LN(x))), v = W_V LN(x), from the layer's weights with nothing of the engine."""
    attn = layer.self_attn
    normed = _rms(layer.input_layernorm, x)  # (B, N, C)
    b, n, _ = normed.shape
    keys = torch.nn.functional.linear(normed, attn.k_proj.weight, attn.k_proj.bias).view(b, n, -1, attn.head_dim)
    if getattr(attn, "k_norm", None) is not None:
        keys = _rms(attn.k_norm, keys)
    values = torch.nn.functional.linear(normed, attn.v_proj.weight, attn.v_proj.bias).view(b, n, -1, attn.head_dim)
    return _rope(keys.transpose(1, 2), cos, sin), values.transpose(1, 2)  # (B, H_kv, N, D) each


@pytest.fixture(scope="module", params=tiny_names())
def deep(request):
    return _deep_tiny(request.param)


@pytest.mark.parametrize("chunk", [None, 16], ids=["whole", "chunked"])
@pytest.mark.parametrize("skip", [3, 6])
@pytest.mark.parametrize("boundary", ["last", "window-4", "window-12"])  # 12: wider than Gemma's window of 8
@torch.no_grad()
def test_every_skipped_layers_kv_equals_a_hand_computation(deep, skip, boundary, chunk):
    """Pruned tokens: from the block-entry state through the layer's own norm, projections, key norm and RoPE.
    Boundary tokens: the same from the state the layer itself receives (they ran the layers before at full depth).
    Whole, and in chunks of 16 (each chunk's pruned tokens from its own block-entry state)."""
    from transformers import DynamicCache

    from poptune.engine.segments import prefill_prompt

    config = PopConfig(skip=skip, boundary=boundary)
    layers = decoder_of(deep).layers
    skipped = config.skipped_layers(len(layers))
    seen: dict[int, list] = {i: [] for i in skipped}
    hooks = [layers[i].register_forward_pre_hook(
        lambda m, args, kwargs, i=i: seen[i].append((args[0], kwargs["position_embeddings"])), with_kwargs=True)
        for i in skipped]
    ids = torch.randint(5, 250, (2, 40), generator=torch.Generator().manual_seed(skip))
    cache = DynamicCache(config=deep.config.get_text_config())
    try:
        with apply_pop(deep, config):
            if chunk is None:
                deep(input_ids=ids, cache=cache, use_cache=True)
            else:
                prefill_prompt(deep, {"input_ids": ids}, chunk=chunk, cache=cache)
    finally:
        for hook in hooks:
            hook.remove()
    assert chunk is None or len(seen[skipped[0]]) == 3  # (0, 16), (16, 32), (32, 40)
    entry = torch.cat([x for x, _ in seen[skipped[0]]], dim=1)  # (B, N, C): the hidden state entering the block
    pruned = ids.shape[1] - config.boundary_width
    for i in skipped:
        x = torch.cat([x for x, _ in seen[i]], dim=1)
        cos, sin = (torch.cat([pe[k] for _, pe in seen[i]], dim=1) for k in (0, 1))
        state = torch.cat([entry[:, :pruned], x[:, pruned:]], dim=1)
        keys, values = _by_hand(layers[i], state, cos, sin)
        kept = cache.layers[i].keys.shape[2]  # a sliding layer keeps only its last window - 1 positions
        torch.testing.assert_close(cache.layers[i].keys, keys[:, :, -kept:], rtol=1e-4, atol=1e-5, msg=f"layer {i}")
        torch.testing.assert_close(cache.layers[i].values, values[:, :, -kept:], rtol=1e-4, atol=1e-5,
                                   msg=f"layer {i}")


# --------------------------------------------------------------------------------------------------------------
# Attention implementations: eager and SDPA (4-D masks), flash attention (2-D masks, faked on CPU), flex refused

FAKE_FLASH = "poptune_fake_fa"  # no "flash" in the name: transformers would import the real kernel


def _fake_flash(module, query, key, value, attention_mask, dropout=0.0, scaling=None, sliding_window=None,
                softcap=None, **kwargs):
    """What a flash kernel computes: causal aligned bottom-right, an optional sliding window, and the 2-D mask as
    key padding; padding queries come out as zeros. Inputs (B, H, Q|K, D); returns (B, Q, H, D)."""
    q, k = query.shape[2], key.shape[2]
    row = torch.arange(q).unsqueeze(1) + (k - q)  # (Q, 1) absolute query positions
    col = torch.arange(k).unsqueeze(0)  # (1, K)
    allowed = (col <= row)[None, None]  # (1, 1, Q, K)
    if sliding_window is not None:
        allowed = allowed & (row - col < sliding_window)
    if attention_mask is not None:
        assert attention_mask.ndim == 2, "a flash kernel takes 2-D masks only"
        allowed = allowed & attention_mask.bool()[:, None, None, :]  # (B, 1, Q, K)
    empty = ~allowed.any(-1, keepdim=True)  # padding queries: no key at all
    groups = query.shape[1] // key.shape[1]
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key.repeat_interleave(groups, 1), value.repeat_interleave(groups, 1), attn_mask=allowed | empty,
        scale=scaling)
    return out.masked_fill(empty, 0.0).transpose(1, 2).contiguous(), None


def _register_fake_flash() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, flash_attention_mask

    AttentionInterface.register(FAKE_FLASH, _fake_flash)
    ALL_MASK_ATTENTION_FUNCTIONS.register(FAKE_FLASH, flash_attention_mask)


def _pop_logits(model, inputs, config):
    from poptune.engine.segments import prefill_prompt

    with apply_pop(model, config), torch.no_grad():
        whole = model(**inputs).logits  # (B, W, V)
        chunked = prefill_prompt(model, inputs, chunk=5).logits  # (B, 1, V)
    return whole, chunked


@pytest.mark.parametrize("name", ["tiny-gemma3", "tiny-qwen3"])
@pytest.mark.parametrize("implementation", ["eager", FAKE_FLASH])
def test_attention_implementations_agree_with_sdpa(name, implementation):
    """Left-padded rows, a window wider than Gemma's sliding window, and chunks: the same logits under each kernel."""
    _register_fake_flash()
    model, tok = load_model(name)
    inputs = prompt_batch(tok, 30, 2)
    inputs["attention_mask"][1, :6] = 0  # the second row left-padded
    for config in (PopConfig(skip=3, boundary="window-12"), PopConfig(skip=4, boundary="last")):
        reference = _pop_logits(model, inputs, config)
        model.set_attn_implementation(implementation)
        try:
            other = _pop_logits(model, inputs, config)
        finally:
            model.set_attn_implementation("sdpa")
        for a, b in zip(reference, other):
            torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)


def test_flex_attention_is_refused_by_name():
    model, _ = load_model("tiny-llama")
    model.config._attn_implementation = "flex_attention"
    with pytest.raises(UnsupportedModelError, match="attention implementation 'flex_attention'"):
        apply_pop(model, PopConfig(skip=2))
