"""POP over an existing cache: chunked prefill equals the whole prompt; later turns are POP prompts."""

from __future__ import annotations

import copy

import pytest
import torch

from poptune import ConfigError, InputError, PopConfig, apply_pop, chunk_bounds, prefill_prompt, remove_pop, stage
from poptune.engine import decoder_of
from poptune.engine.segments import generate
from poptune.measure.timing_prompts import prompt_batch
from poptune.models.configs import tiny_names
from poptune.models.vision import decode_position_ids


def test_chunk_bounds():
    assert chunk_bounds(12, 4) == [(0, 4), (4, 8), (8, 12)]
    assert chunk_bounds(13, 4) == [(0, 4), (4, 8), (8, 11), (11, 13)]  # never a last chunk of one token
    assert chunk_bounds(40, 8, boundary_width=16) == [(0, 8), (8, 16), (16, 24), (24, 40)]  # the window in the last
    assert chunk_bounds(10, None) == chunk_bounds(10, 10) == chunk_bounds(10, 64) == [(0, 10)]
    assert chunk_bounds(10, 4, boundary_width=9) == [(0, 1), (1, 10)]
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ConfigError, match="`prefill_chunk` must be an integer >= 1"):
            chunk_bounds(10, bad)


def _skipped_ffn_tokens(model, config, run):
    """Token counts each skipped layer's FFN saw while ``run()`` ran."""
    layers = decoder_of(model).layers
    seen = []
    hooks = [layers[i].mlp.register_forward_hook(lambda m, a, o: seen.append(a[0].shape[1]))
             for i in config.skipped_layers(len(layers))]
    try:
        run()
    finally:
        for hook in hooks:
            hook.remove()
    return seen


def _lengths(model, tok):
    """A prompt length across the sliding window (the tiny ones: 8; Gemma-3-270M: 512), one chunk that divides
    it and one that does not."""
    window = getattr(decoder_of(model).config, "sliding_window", None)
    return (600, (200, 256)) if window and window > 64 else (48, (8, 10))


def _differences(whole, parts):
    """Largest absolute differences of the first-token logits and of any cached K/V."""
    kv = max(max(float((a.keys - b.keys).abs().max()), float((a.values - b.values).abs().max()))
             for a, b in zip(whole.cache.layers, parts.cache.layers))
    return float((whole.logits - parts.logits).abs().max()), kv


_ROUNDING: dict = {}


def _rounding(model, inputs, chunks):
    """What chunking changes in the unmodified model by float rounding alone, per chunk (once per model and
    prompt: it does not depend on the boundary, and on Gemma-3-270M it is four 600-token prefills)."""
    key = (id(model), tuple(inputs["input_ids"].flatten().tolist()), tuple(inputs["attention_mask"].flatten().tolist()),
           chunks)
    if key not in _ROUNDING:
        whole = prefill_prompt(model, inputs)
        _ROUNDING[key] = {c: _differences(whole, prefill_prompt(model, inputs, chunk=c)) for c in chunks}
    return _ROUNDING[key]


@pytest.mark.parametrize("boundary", ["last", "window-4", "window-12", "none"])
@torch.no_grad()
def test_chunked_prefill_equals_the_whole_prompt(arch, boundary):
    """Same first-token logits and the same K/V in every layer, for chunks that divide the prompt and that do not;
    a batch with a left-padded row on the tiny models. The tolerance is 1e-5, or twice what chunking changes in
    the unmodified model by float rounding alone where that is more (Gemma-3-270M: about 3e-5 in logits of
    magnitude 24, 1.3e-4 in K/V)."""
    model, tok = arch
    length, chunks = _lengths(model, tok)
    batch = 1 if length > 64 else 2
    inputs = prompt_batch(tok, length, batch)
    if batch == 2:
        inputs["attention_mask"][1, :5] = 0
    rounding = _rounding(model, inputs, chunks)
    with apply_pop(model, PopConfig(skip=3, boundary=boundary)):
        whole = prefill_prompt(model, inputs)
        for chunk in chunks:
            parts = prefill_prompt(model, inputs, chunk=chunk)
            assert all(a.get_seq_length() == b.get_seq_length() == length
                       for a, b in zip(whole.cache.layers, parts.cache.layers))
            for difference, own in zip(_differences(whole, parts), rounding[chunk]):
                assert difference <= max(1e-5, 2 * own), (chunk, difference, own)


@torch.no_grad()
def test_chunks_are_pruned_and_only_the_last_has_a_boundary(shared):
    model, tok = shared("tiny-gemma3")
    inputs = prompt_batch(tok, 30, 1)
    config = PopConfig(skip=3, boundary="window-4")
    with apply_pop(model, config):
        assert _skipped_ffn_tokens(model, config, lambda: prefill_prompt(model, inputs, chunk=8)) == [4] * 3
        with stage(model, "chunk"):
            out = model(**inputs)
        assert out.logits.shape[1] == 0  # no position of a chunk ran at full depth


@pytest.mark.parametrize("name", tiny_names())
@pytest.mark.parametrize("boundary", ["last", "window-12"])
def test_chunked_generate_equals_generate(shared, name, boundary):
    model, tok = shared(name)
    inputs = tok(["A somewhat longer prompt than the other one here", "Short prompt"], return_tensors="pt",
                 padding=True)
    kwargs = dict(max_new_tokens=5, do_sample=False)
    with apply_pop(model, PopConfig(skip=3, boundary=boundary)), torch.no_grad():
        whole = model.generate(**inputs, **kwargs)
        assert torch.equal(generate(model, inputs, chunk=7, **kwargs), whole)


def test_image_prompts_are_not_chunked(vlm):
    from poptune import ImageSize, image_prompt, synthetic_image

    model, tok = vlm
    inputs = image_prompt(model, tok, [synthetic_image(ImageSize(40, 30), seed=1)], ["What is this?"])
    with apply_pop(model, PopConfig(skip=2)), pytest.raises(InputError, match="feed image prompts whole"):
        prefill_prompt(model, inputs, chunk=4)


# --------------------------------------------------------------------------------------------------------------
# Conversation turns

TURNS = ["Tell me a story about a fox.", " And then what happened to the dog?", " Why?"]


def _converse(model, tok, config, steps=4):
    """Three turns; each turn's prompt prefilled on top of the conversation's cache, then ``steps`` greedy decode
    steps. Returns per turn: the first-token logits, the tokens skipped layers' FFN saw in the turn's prefill, and
    each decode step's logits under POP and under the full model given the same cache."""
    from transformers import DynamicCache

    turns = []
    cache = DynamicCache(config=model.config.get_text_config())
    mask = torch.zeros(1, 0, dtype=torch.long)
    pending = torch.zeros(1, 0, dtype=torch.long)  # the last answer token, never fed back yet
    for text in TURNS:
        new = torch.cat([pending, tok([text], return_tensors="pt", add_special_tokens=not turns)["input_ids"]], 1)
        mask = torch.cat([mask, torch.ones_like(new)], dim=1)
        inputs = {"input_ids": new, "attention_mask": mask}
        out = {}
        if config is not None:
            apply_pop(model, config)
        out["ffn"] = _skipped_ffn_tokens(model, config or PopConfig(skip=3), lambda out=out, inputs=inputs: out.update(
            prefill=prefill_prompt(model, inputs, cache=cache)))
        token = out["prefill"].logits[:, -1].argmax(-1, keepdim=True)
        out["pop"], out["full"] = [], []
        for _ in range(steps):
            mask = torch.cat([mask, torch.ones_like(token)], dim=1)
            step = dict(input_ids=token, attention_mask=mask, position_ids=decode_position_ids(model, {}, mask),
                        use_cache=True)
            out["pop"].append(model(**step, cache=copy.deepcopy(cache)).logits[:, -1])
            remove_pop(model)
            out["full"].append(model(**step, cache=cache).logits[:, -1])
            if config is not None:
                apply_pop(model, config)
            token = out["full"][-1].argmax(-1, keepdim=True)
        remove_pop(model)
        pending = token
        turns.append(out)
    return turns


@torch.no_grad()
def test_a_three_turn_conversation_prunes_each_turn_and_decodes_like_the_full_model(arch):
    model, tok = arch
    for turn in _converse(model, tok, PopConfig(skip=3, boundary="last")):
        assert turn["ffn"] == [1, 1, 1]  # each turn's prompt is a POP prefill: only its last token at full depth
        for pop, full in zip(turn["pop"], turn["full"]):
            assert torch.equal(pop, full)  # decode is the untouched model


@pytest.mark.parametrize("boundary", ["last", "window-12"])
@torch.no_grad()
def test_later_turns_with_skip1_are_exact(arch, boundary):
    """Over a cache, too, the first skipped layer's K/V is exact: skip=1 equals the full model at every turn."""
    model, tok = arch
    full = _converse(model, tok, None, steps=2)
    pop = _converse(model, tok, PopConfig(skip=1, boundary=boundary), steps=2)
    for a, b in zip(full, pop):
        torch.testing.assert_close(b["prefill"].logits, a["prefill"].logits, rtol=1e-4, atol=1e-5)
        for x, y in zip(a["full"], b["full"]):
            torch.testing.assert_close(y, x, rtol=1e-4, atol=1e-5)


def test_stage_is_validated_and_a_no_op_without_pop(shared):
    model, tok = shared("tiny-llama")
    with pytest.raises(ConfigError, match="`kind` must be one of prompt, chunk, decode"):
        with stage(model, "prefill"):
            pass
    inputs = tok(["Hello there"], return_tensors="pt")
    with torch.no_grad():
        plain = model(**inputs).logits
        with stage(model, "chunk"):
            assert torch.equal(model(**inputs).logits, plain)
