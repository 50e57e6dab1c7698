"""Anchor K/V (issue 48): the skipped layers keep the first prompt token's K/V and the boundary window's only.

The reference is computed by hand: POP with the layers' own K/V, whose skipped layers attend through a mask that
hides exactly the tokens anchor drops (each row's pruned tokens after its first). Masked keys weigh nothing, so
anchor -- whose cache really lacks them -- must give the same logits, prefill and decode, and the same greedy
answer; its skipped layers' caches must hold ``1 + W`` prompt tokens (a sliding layer: those in its window), the
other layers theirs untouched.
"""

from __future__ import annotations

import contextlib
import copy

import pytest
import torch

from poptune.engine import PopConfig, apply_pop, decoder_of
from poptune.engine.segments import prefill_prompt
from poptune.errors import ConfigError, UnsupportedModelError
from poptune.kv.compact import CompactLayer
from poptune.measure.prefill import cache_bytes

TEXT_MODELS = ("tiny-llama", "tiny-qwen3", "tiny-gemma3")
CONFIGS = (PopConfig(3, "window-4", kv="anchor"), PopConfig(2, "last", offset=1, kv="anchor"),
           PopConfig(3, "none", kv="anchor"))
N = 24  # prompt tokens: longer than tiny-gemma3's sliding window (8)


def _prompts(padded: bool) -> dict[str, torch.Tensor]:
    ids = torch.randint(5, 250, (2, N), generator=torch.Generator().manual_seed(7))
    mask = torch.ones_like(ids)
    if padded:
        ids[1, :5], mask[1, :5] = 0, 0  # left padding: row 1's first real token is at column 5
    return {"input_ids": ids, "attention_mask": mask}


@pytest.fixture(params=TEXT_MODELS)
def eager(request, shared):
    """A copy of a tiny model running eager attention (its masks are never skipped)."""
    model, tok = shared(request.param)
    model = copy.deepcopy(model)
    model.set_attn_implementation("eager")
    return model, tok


@contextlib.contextmanager
def masked_to_anchor(model, config, first: torch.Tensor):
    """POP with the layers' own K/V, the skipped layers' attention hiding the columns anchor drops."""
    decoder = decoder_of(model)
    pruned = N - config.boundary_width
    hooks = []

    def hide(module, args, kwargs):
        hidden = kwargs.get("hidden_states", args[0] if args else None)
        cache, mask = kwargs["cache"], kwargs["attention_mask"]
        length, offset = cache.get_mask_sizes(hidden.shape[1], module.layer_idx)
        columns = offset + torch.arange(length)
        dropped = (columns[None, :] > first[:, None]) & (columns[None, :] < pruned)  # (B, KV)
        kwargs["attention_mask"] = mask.masked_fill(dropped[:, None, None, :], torch.finfo(mask.dtype).min)
        return args, kwargs

    for i in config.skipped_layers(len(decoder.layers)):
        hooks.append(decoder.layers[i].self_attn.register_forward_pre_hook(hide, with_kwargs=True))
    try:
        with apply_pop(model, PopConfig(config.skip, config.boundary, config.offset)):
            yield
    finally:
        for hook in hooks:
            hook.remove()


@torch.no_grad()
def _prefill_and_decode(model, inputs, steps=6):
    """The prefill's logits (its full-depth positions), then each greedy decode step's; the cache."""
    out = model(**inputs, use_cache=True)
    logits, cache, mask = [out.logits], out.cache, inputs["attention_mask"]
    token = out.logits[:, -1].argmax(-1, keepdim=True)
    for _ in range(steps):
        mask = torch.cat([mask, torch.ones_like(token)], dim=1)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, -1:]
        out = model(input_ids=token, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True)
        logits.append(out.logits)
        token = out.logits[:, -1].argmax(-1, keepdim=True)
    return logits, cache


@pytest.mark.parametrize("config", CONFIGS, ids=str)
@pytest.mark.parametrize("padded", [False, True])
def test_anchor_equals_own_kv_masked_to_the_same_keys(eager, config, padded):
    model, _ = eager
    inputs = _prompts(padded)
    first = (inputs["attention_mask"] == 0).sum(-1)  # each row's first real token
    with masked_to_anchor(model, config, first):
        reference, _ = _prefill_and_decode(model, inputs)
    with apply_pop(model, config):
        anchor, cache = _prefill_and_decode(model, inputs)
    for a, b in zip(anchor, reference):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    with apply_pop(model, PopConfig(config.skip, config.boundary, config.offset)):
        own, _ = _prefill_and_decode(model, inputs)
    # The dropped keys did matter (with boundary "none" from the first decode step): the test can fail.
    assert not all(torch.allclose(a, o, atol=1e-4) for a, o in zip(anchor, own))


@pytest.mark.parametrize("padded", [False, True])
def test_anchor_under_sdpa_equals_eager_and_generates_the_reference_answer(shared, padded):
    """SDPA's masks are skipped where it can (no padding: is_causal); gathered otherwise; greedy decode agrees."""
    config = PopConfig(3, "window-4", kv="anchor")
    model, _ = shared("tiny-gemma3")
    eager = copy.deepcopy(model)
    eager.set_attn_implementation("eager")
    inputs = _prompts(padded)
    with apply_pop(model, config):
        sdpa, _ = _prefill_and_decode(model, inputs)
        answer = model.generate(**inputs, max_new_tokens=8, do_sample=False)
    first = (inputs["attention_mask"] == 0).sum(-1)
    with masked_to_anchor(eager, config, first):
        reference, _ = _prefill_and_decode(eager, inputs)
        expected = eager.generate(**inputs, max_new_tokens=8, do_sample=False)
    for a, b in zip(sdpa, reference):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert torch.equal(answer, expected)


@pytest.mark.parametrize("name", TEXT_MODELS)
def test_the_skipped_layers_hold_the_anchor_and_the_window_and_the_others_are_untouched(shared, name):
    model, _ = shared(name)
    config = PopConfig(3, "window-4", kv="anchor")
    inputs = _prompts(padded=False)
    with apply_pop(model, config), torch.no_grad():
        anchor = model(**inputs, use_cache=True).cache
    with apply_pop(model, PopConfig(3, "window-4")), torch.no_grad():
        own = model(**inputs, use_cache=True).cache
    decoder = decoder_of(model)
    for i, (a, o) in enumerate(zip(anchor.layers, own.layers)):
        window = getattr(decoder.layers[i].self_attn, "sliding_window", None)
        if i < 3:  # before the block: the same layer, the same K/V
            assert type(a) is type(o) and torch.equal(a.keys, o.keys) and torch.equal(a.values, o.values)
            continue
        assert isinstance(a, CompactLayer) and a.get_seq_length() == o.get_seq_length() == N
        # A full layer keeps the first token and the window; a sliding one (window 8 < N) the window only.
        expected = [list(range(N - 4, N))] * 2 if window else [[0, *range(N - 4, N)]] * 2
        assert a.columns.tolist() == expected and a.keys.shape[-2] == len(expected[0])
        if i == 3:  # the boundary's K/V in the block's first layer: from the same input as own K/V's
            torch.testing.assert_close(a.keys[..., -4:, :], o.keys[..., -4:, :], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(a.get_mask_sizes(1), o.get_mask_sizes(1))
        if not window:  # the anchor: the layer's own projection of the block-entry state, as own K/V writes it
            torch.testing.assert_close(a.keys[..., :1, :], o.keys[..., :1, :], rtol=1e-5, atol=1e-6)
    assert cache_bytes(anchor) < cache_bytes(own)


def test_chunked_prefill_keeps_the_same_anchor_and_logits(shared):
    model, _ = shared("tiny-gemma3")
    inputs = {"input_ids": torch.randint(5, 250, (1, 40), generator=torch.Generator().manual_seed(3)),
              "attention_mask": torch.ones(1, 40, dtype=torch.long)}
    with apply_pop(model, PopConfig(3, "window-4", kv="anchor")), torch.no_grad():
        whole = prefill_prompt(model, inputs)
        chunked = prefill_prompt(model, inputs, chunk=8)
    torch.testing.assert_close(chunked.logits, whole.logits, rtol=1e-4, atol=1e-5)
    for a, b in zip(chunked.cache.layers[3:], whole.cache.layers[3:]):
        assert a.columns.tolist() == b.columns.tolist() and a.get_seq_length() == b.get_seq_length() == 40


def test_a_later_turn_drops_its_pruned_tokens_and_keeps_the_earlier_ones(shared):
    """A turn over a cache: its pruned tokens are dropped in the skipped layers, its boundary kept; a layer that
    held every token before (the first turn ran with the layers' own K/V) keeps them."""
    model, _ = shared("tiny-llama")
    first = _prompts(padded=False)
    with torch.no_grad():
        with apply_pop(model, PopConfig(3, "window-4")):
            cache = model(**first, use_cache=True).cache
        turn = torch.randint(5, 250, (2, 10), generator=torch.Generator().manual_seed(1))
        with apply_pop(model, PopConfig(3, "window-4", kv="anchor")):
            out = model(input_ids=turn, attention_mask=torch.ones(2, N + 10, dtype=torch.long), cache=cache,
                        use_cache=True)
    layer = out.cache.layers[4]
    assert layer.columns[0].tolist() == [*range(N), *range(N + 6, N + 10)] and layer.get_seq_length() == N + 10
    assert out.logits.shape[1] == 4


def test_speculative_crop_and_beam_reorder_keep_the_columns(shared):
    model, _ = shared("tiny-llama")
    with apply_pop(model, PopConfig(3, "window-4", kv="anchor")), torch.no_grad():
        cache = model(**_prompts(padded=True), use_cache=True).cache
        layer = cache.layers[5]
        assert layer.columns.tolist() == [[0, 20, 21, 22, 23], [5, 20, 21, 22, 23]]
        layer.update(torch.zeros(2, 2, 3, 16), torch.zeros(2, 2, 3, 16))
        assert layer.get_seq_length() == N + 3 and layer.keys.shape[-2] == 8
        layer.crop(-2)
        assert layer.get_seq_length() == N + 1 and layer.columns[1].tolist() == [5, 20, 21, 22, 23, 24]
        assert layer.bounds == (5, 20, 21, 22, 23, 24)  # the anchor's: the most pads a row starts with
        with pytest.raises(RuntimeError, match="did not keep them all"):
            layer.crop(-6)  # tokens 20-24 are held, but 19 was dropped
        layer.reorder_cache(torch.tensor([1, 1]))
        assert layer.columns[0].tolist() == [5, 20, 21, 22, 23, 24]


def test_anchor_is_refused_where_it_cannot_run(shared):
    with pytest.raises(ConfigError, match="needs skip >= 1"):
        PopConfig(0, kv="anchor")
    model, _ = shared("tiny-llama")
    flash = copy.deepcopy(model)
    flash.config._attn_implementation = "flash_attention_2"  # its masks are 2-D: refused by name, before any forward
    with pytest.raises(UnsupportedModelError, match="needs eager or sdpa attention"):
        apply_pop(flash, PopConfig(3, kv="anchor"))


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3"])  # tiny-gemma3: compact sliding layers, cropped
def test_speculative_generation_under_anchor_equals_plain_greedy(shared, name):
    """Rounds of proposals fed at once, the compact caches cropped back to the accepted tokens (issue 48: the
    accuracy sweep verifies drafts): the same tokens as plain greedy generation, drafts right or wrong."""
    from poptune.engine.prefix import PrefixStates
    from poptune.engine.speculate import generate

    model, tok = shared(name)
    inputs = dict(tok(["a much longer prompt than the other one, " * 4, "short prompt"], return_tensors="pt",
                      padding=True))
    n = inputs["input_ids"].shape[1]
    with apply_pop(model, PopConfig(3, "window-4", kv="anchor")), torch.inference_mode():
        plain = model.generate(**inputs, do_sample=False, max_new_tokens=12, pad_token_id=0)
        for answers in (plain[:, n:], torch.full_like(plain[:, n:], 7)):  # drafts that hold, drafts that do not
            states = PrefixStates()
            states.record_drafts(inputs, torch.cat([inputs["input_ids"], answers], dim=-1), eos=set())
            with states.attached(model):
                out = generate(model, inputs, states=states, do_sample=False, max_new_tokens=12, pad_token_id=0)
            assert torch.equal(out, plain) and states.drafted > 0


def test_the_benchmark_times_anchor_decode_and_weighs_its_smaller_cache(shared):
    """The bench decodes the POP side's cache with the unmodified model: a compact cache's masks are gathered
    there too (tiny-gemma3's sliding layers get a 4-D mask once the window is full), and its K/V bytes are
    the compact cache's."""
    from poptune.measure import RepeatPolicy
    from poptune.measure.bench import BenchSpec, run_bench

    model, tok = shared("tiny-gemma3")
    spec = BenchSpec(lengths=(40,), decode_tokens=3, policy=RepeatPolicy(warmup=0, min_repeats=2, min_seconds=0.0),
                     null_check=False)
    (row,) = run_bench(model, tok, PopConfig(3, "window-4", kv="anchor"), spec, model_name="tiny-gemma3").rows
    assert row.decode is not None and row.decode.a.count == 2
    assert row.kv_bytes < row.full_kv_bytes


def test_the_flops_ideal_counts_only_what_anchor_keeps(shared):
    """Anchor's skipped layers project one pruned token's K/V, and their boundary attends over it and itself:
    the FLOPs ideal counts that, so a measured anchor speedup is not held against own K/V's ideal."""
    from poptune.measure.flops import ideal_speedup, prefill_flops

    model, _ = shared("tiny-llama")  # full attention: 64 wide, 4 heads, 2 K/V heads of 16
    config = decoder_of(model).config
    own, anchor = PopConfig(3, "window-4"), PopConfig(3, "window-4", kv="anchor")
    kv, per_key = 2 * 2 * 64 * 2 * 16, 2 * 2 * 4 * 16
    own_keys, anchor_keys = 37 + 38 + 39 + 40, 2 + 3 + 4 + 5  # the boundary's 4 queries of a 40-token prompt
    expected = 3 * ((36 - 1) * kv + per_key * (own_keys - anchor_keys))
    assert prefill_flops(config, 40, own) - prefill_flops(config, 40, anchor) == expected
    assert ideal_speedup(config, 40, anchor) > ideal_speedup(config, 40, own)
    assert prefill_flops(config, 40, PopConfig(3, "window-4", kv="calibrated")) == prefill_flops(config, 40, own)
