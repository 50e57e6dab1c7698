"""The POP engine on every supported architecture's tiny config and on the real Gemma-3-270M."""

from __future__ import annotations

import pytest
import torch

import poptune.engine as engine
import poptune.engine.block as block
import poptune.kv.block_kv as block_kv
import poptune.kv.project as project
from poptune import ConfigError, PopConfig, UnsupportedModelError, apply_pop, get_pop_config, remove_pop

PROMPT = "The quick brown fox jumps over the lazy dog, again and again."  # 62 bytes: crosses gemma's window of 8
DECODE_STEPS = 5


def _ids(tokenizer, text=PROMPT):
    return tokenizer([text], return_tensors="pt")


@torch.no_grad()
def _prefill_and_decode(model, inputs, steps=DECODE_STEPS, cache=None):
    """Logits of the last prompt position, then of each greedy decode step (the same tokens for comparisons)."""
    from poptune.models.vision import decode_position_ids

    out = model(**inputs, cache=cache, use_cache=True)
    logits = [out.logits[:, -1]]
    cache = out.cache
    mask = inputs["attention_mask"]
    token = logits[-1].argmax(-1, keepdim=True)
    for _ in range(steps):
        mask = torch.cat([mask, torch.ones_like(token)], dim=1)
        positions = decode_position_ids(model, inputs, mask)
        out = model(input_ids=token, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True)
        logits.append(out.logits[:, -1])
        token = logits[-1].argmax(-1, keepdim=True)
    return logits, cache


def test_skip0_is_bit_identical(arch):
    model, tok = arch
    inputs = _ids(tok)
    full, _ = _prefill_and_decode(model, inputs)
    with apply_pop(model, PopConfig(skip=0)):
        pop, _ = _prefill_and_decode(model, inputs)
    for a, b in zip(full, pop):
        assert torch.equal(a, b)


@pytest.mark.parametrize("boundary", ["last", "window-4"])
def test_skip1_is_exact(arch, boundary):
    """The last layer's prompt K/V depends only on its input, which the retained layers compute exactly."""
    model, tok = arch
    inputs = _ids(tok)
    full, _ = _prefill_and_decode(model, inputs)
    with apply_pop(model, PopConfig(skip=1, boundary=boundary)):
        pop, _ = _prefill_and_decode(model, inputs)
    for a, b in zip(full, pop):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("config", [PopConfig(skip=3, boundary="window-4"),
                                    PopConfig(skip=3, boundary="window-4", layers=(1, 2, 4))])
def test_pop_really_skips(arch, config):
    """In prefill the skipped layers' FFN sees only the boundary tokens, and so does the LM head."""
    model, tok = arch
    layers = engine.decoder_of(model).layers
    inputs = _ids(tok)
    n = inputs["input_ids"].shape[1]
    mlp_tokens = {i: [] for i in range(len(layers))}
    head_tokens = []
    hooks = [layers[i].mlp.register_forward_hook(lambda m, a, o, i=i: mlp_tokens[i].append(a[0].shape[1]))
             for i in range(len(layers))]
    hooks.append(model.get_output_embeddings().register_forward_hook(lambda m, a, o: head_tokens.append(a[0].shape[1])))
    try:
        with apply_pop(model, config), torch.no_grad():
            out = model(**inputs)
    finally:
        for h in hooks:
            h.remove()
    skipped = set(config.skipped_layers(len(layers)))
    for i, tokens in mlp_tokens.items():
        assert tokens == ([4] if i in skipped else [n]), (i, tokens)
    assert head_tokens == [4]
    assert out.logits.shape[1] == 4


def test_boundary_none_runs_the_last_token_pruned(arch):
    """With boundary=none and skip=1, the first token equals the model whose last layer is an identity."""
    model, tok = arch
    inputs = _ids(tok)
    last = engine.decoder_of(model).layers[-1]
    with apply_pop(model, PopConfig(skip=1, boundary="none")), torch.no_grad():
        pop = model(**inputs).logits
    last.forward = lambda hidden_states, **_: hidden_states
    try:
        with torch.no_grad():
            reference = model(**inputs).logits[:, -1:]
    finally:
        del last.forward
    assert pop.shape[1] == 1
    torch.testing.assert_close(pop, reference, rtol=1e-4, atol=1e-5)


def _exact_cache(model, inputs):
    """The full model's K/V for every prompt position and layer (a cache that never drops sliding entries)."""
    from transformers import DynamicCache

    with torch.no_grad():
        return model(**inputs, cache=DynamicCache(), use_cache=True).cache


def test_exact_kv_reproduces_the_full_model(arch, monkeypatch):
    model, tok = arch
    inputs = _ids(tok)
    exact = _exact_cache(model, inputs)
    full, _ = _prefill_and_decode(model, inputs)

    def write_exact(layer, hidden_states, position_embeddings, cache, fitted=None):
        idx = layer.self_attn.layer_idx
        n = hidden_states.shape[1]
        cache.update(exact.layers[idx].keys[:, :, :n], exact.layers[idx].values[:, :, :n], idx)

    monkeypatch.setattr(project, "write_prompt_kv", write_exact)
    monkeypatch.setattr(block_kv, "plan", lambda *args: None)  # every layer through the per-layer write
    with apply_pop(model, PopConfig(skip=3)):
        pop, _ = _prefill_and_decode(model, inputs)
    for a, b in zip(full, pop):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@torch.no_grad()
def test_only_the_approximated_kv_differs(arch):
    """Layers before the block hold exact K/V; so does the first skipped layer; deeper skipped ones do not."""
    model, tok = arch
    inputs = _ids(tok)
    n = inputs["input_ids"].shape[1]
    exact = _exact_cache(model, inputs)
    config = PopConfig(skip=3, boundary="none")
    skipped = config.skipped_layers(len(engine.decoder_of(model).layers))
    from transformers import DynamicCache

    with apply_pop(model, config):
        cache = model(**inputs, cache=DynamicCache(), use_cache=True).cache
    for idx in range(skipped.start + 1):
        torch.testing.assert_close(cache.layers[idx].keys, exact.layers[idx].keys[:, :, :n], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(cache.layers[idx].values, exact.layers[idx].values[:, :, :n], rtol=1e-4, atol=1e-5)
    deeper = [not torch.allclose(cache.layers[i].keys, exact.layers[i].keys, atol=1e-5) for i in skipped[1:]]
    assert all(deeper)


def test_cache_layout_matches_full_prefill(arch):
    """Same per-layer cache types and shapes; with a prompt past the window, sliding layers stay sliding."""
    from poptune.measure.timing_prompts import prompt_batch

    model, tok = arch
    window = getattr(engine.decoder_of(model).config, "sliding_window", None) or 32
    inputs = prompt_batch(tok, window + 8)
    with torch.no_grad():
        full = model(**inputs, use_cache=True).cache
        with apply_pop(model, PopConfig(skip=3)):
            pop = model(**inputs, use_cache=True).cache
    assert len(full.layers) == len(pop.layers)
    for a, b in zip(full.layers, pop.layers):
        assert type(a) is type(b)
        assert a.keys.shape == b.keys.shape and a.values.shape == b.values.shape
        assert a.get_seq_length() == b.get_seq_length() == window + 8
    sliding = [layer for layer in pop.layers if getattr(layer, "is_sliding", False)]
    assert all(layer.keys.shape[2] == window - 1 for layer in sliding)


def test_generation_past_the_sliding_window_is_exact_with_skip1(arch):
    from poptune.measure.timing_prompts import prompt_batch

    model, tok = arch
    window = getattr(engine.decoder_of(model).config, "sliding_window", None) or 32
    inputs = prompt_batch(tok, window + 4)
    kwargs = dict(max_new_tokens=8, do_sample=False)
    with torch.no_grad():
        full = model.generate(**inputs, **kwargs)
        with apply_pop(model, PopConfig(skip=1)):
            pop = model.generate(**inputs, **kwargs)
    assert torch.equal(full, pop)


@pytest.mark.parametrize("boundary", ["last", "window-4", "none"])
def test_batched_generate_equals_one_by_one(arch, boundary):
    model, tok = arch
    prompts = ["Hi", "A somewhat longer prompt here", "Mid-size prompt text", "x" * 45]
    kwargs = dict(max_new_tokens=6, do_sample=False)
    with apply_pop(model, PopConfig(skip=3, boundary=boundary)), torch.no_grad():
        batch = model.generate(**tok(prompts, return_tensors="pt", padding=True), **kwargs)
        new = batch[:, -6:]
        for row, prompt in enumerate(prompts):
            single = model.generate(**tok([prompt], return_tensors="pt"), **kwargs)
            assert torch.equal(single[0, -6:], new[row]), (row, prompt)


def test_pop_changes_the_output_when_it_skips_deep_layers(arch):
    """A guard against an engine that silently runs the full model."""
    model, tok = arch
    inputs = _ids(tok)
    with torch.no_grad():
        full = model(**inputs).logits[:, -1]
        with apply_pop(model, PopConfig(skip=4)):
            pop = model(**inputs).logits[:, -1]
    assert not torch.allclose(full, pop, atol=1e-6)


def test_apply_remove_and_context_manager(arch):
    model, tok = arch
    inputs = _ids(tok)
    with torch.no_grad():
        full = model(**inputs).logits
        handle = apply_pop(model, PopConfig(skip=2))
        assert get_pop_config(model) == PopConfig(skip=2)
        apply_pop(model, PopConfig(skip=3, boundary="none"))  # re-applying replaces the configuration
        assert handle.config == PopConfig(skip=3, boundary="none")
        remove_pop(model)
        assert get_pop_config(model) is None
        assert torch.equal(model(**inputs).logits, full)
        with apply_pop(model, PopConfig(skip=2)):
            assert model(**inputs).logits.shape[1] == 1
        assert torch.equal(model(**inputs).logits, full)
    remove_pop(model)  # removing twice is harmless


def test_validation_messages(arch):
    model, _ = arch
    layers = len(engine.decoder_of(model).layers)
    with pytest.raises(ConfigError, match=rf"`skip` must be in \[0, {layers - 1}\] for this model, got {layers}"):
        apply_pop(model, PopConfig(skip=layers))
    with pytest.raises(ConfigError, match=r"`offset` must be in \[0, 1\]"):
        apply_pop(model, PopConfig(skip=layers - 2, offset=2))
    assert get_pop_config(model) is None


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(skip=-1), "`skip` must be >= 0"),
        (dict(skip=1.5), "`skip` must be an integer"),
        (dict(skip=1, boundary="first"), "`boundary` must be one of"),
        (dict(skip=1, boundary="window-0"), "`boundary` must be one of"),
        (dict(skip=1, offset=-2), "`offset` must be >= 0"),
        (dict(skip=2, layers=(3, 1)), "distinct indices"),
        (dict(skip=2, layers=[1, 3]), "must be a tuple"),
        (dict(skip=1, layers=(1, 3)), "`skip` must be 2"),
        (dict(skip=2, offset=1, layers=(1, 3)), "`offset` 0"),
    ],
)
def test_config_validation(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        PopConfig(**kwargs)


def test_config_round_trip_and_widths():
    config = PopConfig(skip=6, boundary="window-16", offset=1)
    assert PopConfig.from_dict(config.to_dict()) == config
    assert [PopConfig(1, b).boundary_width for b in ("none", "last", "window-4", "window-64")] == [0, 1, 4, 64]
    assert list(PopConfig(skip=6, offset=1).skipped_layers(18)) == list(range(11, 17))
    with pytest.raises(ConfigError, match="unknown PopConfig field"):
        PopConfig.from_dict({"skip": 1, "depth": 2})
    chosen = PopConfig(skip=2, boundary="none", layers=(4, 9))
    assert chosen.to_dict() == {"skip": 2, "boundary": "none", "offset": 0, "layers": [4, 9]}
    assert PopConfig.from_dict(chosen.to_dict()) == chosen and chosen.skipped_layers(18) == (4, 9)
    assert "layers" not in config.to_dict()  # stored block configurations keep their three fields
    with pytest.raises(ConfigError, match=r"`layers` must be in \[0, 5\]"):
        chosen.check(6)


def test_explicit_last_layer_equals_the_block_of_one(arch):
    model, tok = arch
    inputs = _ids(tok)
    last = len(engine.decoder_of(model).layers) - 1
    with apply_pop(model, PopConfig(skip=1, boundary="none")), torch.no_grad():
        block = model(**inputs).logits
    with apply_pop(model, PopConfig(skip=1, boundary="none", layers=(last,))), torch.no_grad():
        chosen = model(**inputs).logits
    assert torch.equal(block, chosen)


def test_unsupported_architecture_is_refused_by_name():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64))
    with pytest.raises(UnsupportedModelError, match="GPT2LMHeadModel"):
        apply_pop(model, PopConfig(skip=1))


# --------------------------------------------------------------------------------------------------------------
# Image prompts (Qwen3-VL with deepstack and mRoPE; Gemma-3 with a bidirectional mask within each image)

QUESTION = "What is in this picture?"


def _image_inputs(model, tok, sizes=((40, 30),), texts=(QUESTION,)):
    from poptune import ImageSize, image_prompt, synthetic_image

    images = [synthetic_image(ImageSize(w, h), seed=w * h) for w, h in sizes]  # one picture per size
    return image_prompt(model, tok, images, list(texts))


def _window_through_the_image(model, inputs):
    """A boundary window that starts inside the (first row's) image: its last 3 image tokens and the text."""
    image = (inputs["input_ids"][0] == model.config.image_token_id).nonzero()[:, 0]
    return f"window-{inputs['input_ids'].shape[1] - int(image[-3])}"


def test_images_skip0_is_bit_identical(vlm):
    model, tok = vlm
    inputs = _image_inputs(model, tok)
    full, _ = _prefill_and_decode(model, inputs)
    with apply_pop(model, PopConfig(skip=0)):
        pop, _ = _prefill_and_decode(model, inputs)
    for a, b in zip(full, pop):
        assert torch.equal(a, b)


@pytest.mark.parametrize("boundary", ["last", "window-4", "through-image"])
def test_images_skip1_is_exact(vlm, boundary):
    """At prefill (every boundary position) and every decode step, also with a window ending inside the image."""
    model, tok = vlm
    inputs = _image_inputs(model, tok)
    if boundary == "through-image":
        boundary = _window_through_the_image(model, inputs)
    config = PopConfig(skip=1, boundary=boundary)
    with torch.no_grad():
        full_prefill = model(**inputs).logits[:, -config.boundary_width :]
    full, _ = _prefill_and_decode(model, inputs)
    with apply_pop(model, config):
        with torch.no_grad():
            pop_prefill = model(**inputs).logits
        pop, _ = _prefill_and_decode(model, inputs)
    torch.testing.assert_close(pop_prefill, full_prefill, rtol=1e-4, atol=1e-5)
    for a, b in zip(full, pop):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_window_through_a_bidirectional_image_uses_the_image_mask(shared, monkeypatch):
    """Gemma-3's image tokens attend to later tokens of their image: the boundary rows keep that mask.

    The boundary tokens of a skipped layer get the model's own mask rows; had they a causal mask instead, the
    image tokens inside the window would differ from the full model (the second half shows the test notices).
    """
    model, tok = shared("tiny-gemma3-vl")
    inputs = _image_inputs(model, tok)
    config = PopConfig(skip=1, boundary=_window_through_the_image(model, inputs))
    with torch.no_grad():
        full = model(**inputs).logits[:, -config.boundary_width :]
        with apply_pop(model, config):
            pop = model(**inputs).logits
        torch.testing.assert_close(pop, full, rtol=1e-4, atol=1e-5)

        exact_mask = block._boundary_mask

        def causal(mask, *args):
            sliced = exact_mask(mask, *args)  # (B, 1, W, KV) bool, bottom-right aligned
            w, kv = sliced.shape[-2:]
            return sliced & torch.ones(w, kv, dtype=torch.bool).tril(kv - w)

        monkeypatch.setattr(block, "_boundary_mask", causal)
        with apply_pop(model, config):
            causal_pop = model(**inputs).logits
    image_rows = slice(0, 3)  # the window's first three positions are image tokens
    assert not torch.allclose(causal_pop[:, image_rows], full[:, image_rows], atol=1e-4)


@pytest.mark.parametrize("boundary", ["last", "through-image"])
def test_images_exact_kv_reproduces_the_full_model(vlm, boundary, monkeypatch):
    """With the full model's K/V written for the pruned tokens, skip=5 equals the full model at every boundary
    position: boundary tokens see their exact mask rows, positions and (Qwen3-VL) deepstack features."""
    model, tok = vlm
    inputs = _image_inputs(model, tok)
    if boundary == "through-image":
        boundary = _window_through_the_image(model, inputs)
    config = PopConfig(skip=5, boundary=boundary)
    exact = _exact_cache(model, inputs)
    with torch.no_grad():
        full = model(**inputs).logits[:, -config.boundary_width :]

    def write_exact(layer, hidden_states, position_embeddings, cache, fitted=None):
        idx = layer.self_attn.layer_idx
        n = hidden_states.shape[1]
        cache.update(exact.layers[idx].keys[:, :, :n], exact.layers[idx].values[:, :, :n], idx)

    monkeypatch.setattr(project, "write_prompt_kv", write_exact)
    monkeypatch.setattr(block_kv, "plan", lambda *args: None)  # every layer through the per-layer write
    with apply_pop(model, config), torch.no_grad():
        pop = model(**inputs).logits
    torch.testing.assert_close(pop, full, rtol=1e-4, atol=1e-5)


@torch.no_grad()
def test_deepstack_features_reach_the_skipped_layers(shared):
    """Qwen3-VL adds deepstack features to the image positions after layers 0 and 1 (tiny config); with layers
    1-5 skipped, the injection after layer 1 still applies: layer 2 writes its K/V from x + deepstack[1]."""
    from transformers import DynamicCache

    model, tok = shared("tiny-qwen3-vl")
    inputs = _image_inputs(model, tok)
    layers = engine.decoder_of(model).layers
    seen = {}
    hook = layers[1].register_forward_pre_hook(lambda m, a, kw: seen.update(x=a[0], pe=kw["position_embeddings"]),
                                               with_kwargs=True)
    try:
        model(**inputs)  # the full model: x is the hidden state entering layer 1 (the first skipped one)
    finally:
        hook.remove()
    with apply_pop(model, PopConfig(skip=5, boundary="none")):
        cache = model(**inputs, cache=DynamicCache(), use_cache=True).cache
    features = model.model.get_image_features(inputs["pixel_values"], inputs["image_grid_thw"])
    deepstack = torch.cat(features.deepstack_features[1])  # (image tokens, C)
    visual = inputs["input_ids"] == model.config.image_token_id  # (B, N)
    with_injection = seen["x"].clone()
    with_injection[visual] += deepstack

    def keys_from(x):
        expected = DynamicCache()
        for i in range(3):  # indices 0-1 as placeholders so that layer 2 lands at its own index
            expected.update(cache.layers[i].keys, cache.layers[i].values, i)
        expected.layers[2] = type(expected.layers[2])()
        project.write_prompt_kv(layers[2], x, seen["pe"], expected)
        return expected.layers[2].keys

    torch.testing.assert_close(cache.layers[2].keys, keys_from(with_injection), rtol=1e-4, atol=1e-5)
    assert not torch.allclose(cache.layers[2].keys, keys_from(seen["x"]), atol=1e-4)


@pytest.mark.parametrize("boundary", ["last", "window-4"])
def test_batched_image_prompts_equal_one_by_one(vlm, boundary):
    """Two images of different sizes (Qwen3-VL: different token counts) and questions, left-padded."""
    model, tok = vlm
    sizes, texts = ((40, 30), (160, 128)), (QUESTION, "Describe the colours, please.")
    batch = _image_inputs(model, tok, sizes, texts)
    kwargs = dict(max_new_tokens=6, do_sample=False)
    with apply_pop(model, PopConfig(skip=3, boundary=boundary)), torch.no_grad():
        batch_logits = model(**batch).logits[:, -1]
        batch_new = model.generate(**batch, **kwargs)[:, -6:]
        for row in range(2):
            one = _image_inputs(model, tok, sizes[row : row + 1], texts[row : row + 1])
            torch.testing.assert_close(model(**one).logits[0, -1], batch_logits[row], rtol=1e-4, atol=1e-5)
            assert torch.equal(model.generate(**one, **kwargs)[0, -6:], batch_new[row]), row
    counts = (batch["input_ids"] == model.config.image_token_id).sum(-1)
    if "image_grid_thw" in batch:
        assert counts[0] != counts[1]  # the padding is real: different image token counts


@pytest.mark.integration
def test_gemma_with_a_third_skipped_writes_fluent_text(gemma):
    """skip=6 of 18, boundary=last: the continuation is English the full model itself finds likely."""
    model, tok = gemma
    inputs = tok(["The capital of France is"], return_tensors="pt")
    n = inputs["input_ids"].shape[1]
    with apply_pop(model, PopConfig(skip=6, boundary="last")), torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=24, do_sample=False)
    text = tok.decode(out[0, n:], skip_special_tokens=True)
    with torch.no_grad():
        logits = model(out).logits[0, n - 1 : -1]
    nll = torch.nn.functional.cross_entropy(logits, out[0, n:]).item()
    words = text.split()
    assert len(words) >= 10 and all(w.strip(".,;:'\"()").isalpha() for w in words[:10]), text
    # nats per token under the full model (measured: 0.98; skip=17 without boundary: 2.84)
    assert nll < 2.0, (text, nll)


# --------------------------------------------------------------------------------------------------------------
# Stages and inputs


@torch.no_grad()
def test_boundary_none_prunes_a_one_token_prompt_alone_as_in_a_batch(arch):
    """A forward over an empty cache is a prompt whatever its length: a row's score does not depend on its batch."""
    model, tok = arch
    longer = tok([PROMPT[:20]], return_tensors="pt")["input_ids"]  # (1, L)
    one = longer[:, -1:]  # a one-token prompt
    ids = torch.cat([torch.cat([torch.full_like(longer[:, 1:], tok.pad_token_id), one], dim=1), longer])
    mask = torch.ones_like(ids)
    mask[0, :-1] = 0  # the one-token row, left-padded beside the longer one
    full = model(input_ids=one).logits[:, -1]
    with apply_pop(model, PopConfig(skip=3, boundary="none")):
        alone = model(input_ids=one).logits[:, -1]
        together = model(input_ids=ids, attention_mask=mask).logits[:1, -1]
    torch.testing.assert_close(together, alone, rtol=1e-4, atol=1e-4)  # the bug it guards against: 0.09-0.2 nats
    assert not torch.allclose(alone, full, atol=1e-3)  # pruned, not the full model


def test_right_padding_is_refused(shared):
    from poptune import InputError

    model, tok = shared("tiny-llama")
    tok.padding_side = "right"
    try:
        inputs = tok(["a longer prompt than the other", "short"], return_tensors="pt", padding=True)
    finally:
        tok.padding_side = "left"
    with apply_pop(model, PopConfig(skip=2)), pytest.raises(InputError, match=r"left-padded prompts.*row\(s\) \[1\]"):
        model(**inputs)
    with torch.no_grad():
        model(**inputs)  # the plain model is not POP's to police
