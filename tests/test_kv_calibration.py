"""Calibrated K/V for the skipped block: the fit, the engine's use of the maps, their files."""

from __future__ import annotations

import copy

import pytest
import torch

from poptune import ConfigError, DataError, PopConfig, apply_pop, load_model
from poptune.calibration import calibration
from poptune.engine import attach_kv_maps, decoder_of, detach_kv_maps
from poptune.kvfit import KVFitSpec, KVFitter, calibrated_kv_maps, prepare_kv
from poptune.kvmaps import KVMaps, file_sha256
from poptune.measure.prompts import prompt_batch
from poptune.models.configs import tiny_names
from poptune.segments import generate, prefill_prompt

FINGERPRINT = "test-weights"


def _maps(model, start, stop, make):
    """Maps of block [start, stop) with ``make(own_weight) -> weight`` for each K and V projection."""
    layers = decoder_of(model).layers
    weights = {i: (make(layers[i].self_attn.k_proj.weight), make(layers[i].self_attn.v_proj.weight))
               for i in range(start + 1, stop)}
    return KVMaps(start, stop, weights, FINGERPRINT)


def _own(weight):
    return weight.detach().clone()


def _random(seed):
    generator = torch.Generator().manual_seed(seed)
    return lambda weight: torch.randn(weight.shape, generator=generator) * weight.std()


@torch.no_grad()
def _first_logits(model, inputs, config, chunk=None):
    with apply_pop(model, config):
        return prefill_prompt(model, inputs, chunk=chunk).logits


@torch.no_grad()
def _prefill(model, inputs, config):
    """The first-token logits and every layer's cached K/V, flattened into one vector."""
    with apply_pop(model, config):
        out = prefill_prompt(model, inputs)
    kv = [t.flatten() for layer in out.cache.layers for t in (layer.keys, layer.values)]
    return torch.cat([out.logits.flatten(), *kv])


def test_config_kv_field_is_validated_and_stored_only_when_calibrated():
    assert PopConfig(6).to_dict() == {"skip": 6, "boundary": "last", "offset": 0}
    calibrated = PopConfig(6, kv="calibrated")
    assert calibrated.to_dict() == {"skip": 6, "boundary": "last", "offset": 0, "kv": "calibrated"}
    assert PopConfig.from_dict(calibrated.to_dict()) == calibrated
    assert str(calibrated) == "skip=6 boundary=last offset=0 kv=calibrated"
    with pytest.raises(ConfigError, match="`kv` must be one of own, calibrated"):
        PopConfig(6, kv="fitted")
    with pytest.raises(ConfigError, match="needs skip >= 1"):
        PopConfig(0, kv="calibrated")
    with pytest.raises(ConfigError, match="a final block"):
        PopConfig(2, layers=(1, 3), kv="calibrated")


def test_calibrated_without_maps_is_refused_before_anything_changes(shared):
    model, _ = shared("tiny-llama")
    with pytest.raises(ConfigError, match=r"needs fitted K/V maps of layers \[3, 6\)"):
        apply_pop(model, PopConfig(3, kv="calibrated"))
    assert not hasattr(model, "_poptune_pop")


@pytest.mark.parametrize("name", tiny_names())
@pytest.mark.parametrize("boundary,offset", [("last", 0), ("none", 1), ("window-4", 0), ("window-12", 2)])
def test_maps_equal_to_the_own_projections_change_nothing(shared, name, boundary, offset):
    """The plumbing: calibrated K/V with maps that are the layers' own weights is the paper's POP, exactly, in a
    left-padded batch (logits and cache); random maps really change the prefill (the cache, and with a boundary
    the logits)."""
    model, tok = shared(name)
    inputs = prompt_batch(tok, 40, 2)
    inputs["attention_mask"][1, :5] = 0
    inputs["input_ids"][1, :5] = tok.pad_token_id
    own = PopConfig(3, boundary, offset)
    calibrated = PopConfig(3, boundary, offset, kv="calibrated")
    start = 6 - offset - 3
    try:
        attach_kv_maps(model, _maps(model, start, start + 3, _own))
        assert torch.equal(_prefill(model, inputs, own), _prefill(model, inputs, calibrated))
        attach_kv_maps(model, _maps(model, start, start + 3, _random(0)))
        assert not torch.allclose(_prefill(model, inputs, own), _prefill(model, inputs, calibrated))
        if boundary != "none":
            assert not torch.allclose(_first_logits(model, inputs, own), _first_logits(model, inputs, calibrated))
    finally:
        detach_kv_maps(model)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3"])
def test_calibrated_chunked_prefill_and_generate_equal_the_whole_prompt(shared, name):
    model, tok = shared(name)
    config = PopConfig(3, "window-4", kv="calibrated")
    try:
        attach_kv_maps(model, _maps(model, 3, 6, _random(1)))
        inputs = prompt_batch(tok, 48, 1)
        whole, parts = _first_logits(model, inputs, config), _first_logits(model, inputs, config, chunk=10)
        torch.testing.assert_close(parts, whole, rtol=1e-4, atol=1e-5)
        prompts = tok(["A somewhat longer prompt than the other one here", "Short prompt"], return_tensors="pt",
                      padding=True)
        with apply_pop(model, config), torch.no_grad():
            expected = model.generate(**prompts, max_new_tokens=5, do_sample=False)
            assert torch.equal(generate(model, prompts, chunk=7, max_new_tokens=5, do_sample=False), expected)
    finally:
        detach_kv_maps(model)


@pytest.mark.parametrize("name", tiny_names())
def test_skip1_calibrated_equals_own_exactly(shared, name):
    """The block's first layer needs no map (its input is the block-entry state), so one skipped layer has none."""
    model, tok = shared(name)
    fitter = KVFitter(model, tok, KVFitSpec(samples=2, length=32), FINGERPRINT)
    maps = fitter.fit(5, 6)
    assert maps.weights == {}
    inputs = prompt_batch(tok, 24, 1)
    try:
        attach_kv_maps(model, maps)
        assert torch.equal(_first_logits(model, inputs, PopConfig(1)),
                           _first_logits(model, inputs, PopConfig(1, kv="calibrated")))
    finally:
        detach_kv_maps(model)


def _linear_block_model():
    """A tiny Llama whose layer 4 maps LN(h) to LN(h) Q^T (Q orthogonal), exactly, so that layer 5's true K/V is
    W Q LN(h_4): a linear function of its block-entry state that its own projection W gets wrong.

    Layers 0-3 are identities (zero attention and MLP outputs) and every embedding row has RMS 1, so the
    block-entry state has RMS 1 on every token; layer 4 has no attention output and an MLP replaced by the
    linear map ``Q - I`` on its normed input, so ``h_5 = Q h_4`` keeps RMS 1; the norms' weights are 1.
    """
    model, tok = load_model("tiny-llama")
    decoder = decoder_of(model)
    size = decoder.config.hidden_size
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        embed = decoder.embed_tokens.weight
        embed.copy_(embed / embed.pow(2).mean(-1, keepdim=True).sqrt())
        for layer in decoder.layers:
            layer.input_layernorm.weight.fill_(1.0)
            layer.post_attention_layernorm.weight.fill_(1.0)
        for layer in decoder.layers[:5]:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        q, _ = torch.linalg.qr(torch.randn(size, size, generator=generator))
        linear = torch.nn.Linear(size, size, bias=False)
        linear.weight.copy_(q - torch.eye(size))
        decoder.layers[4].mlp = linear
        for layer in decoder.layers:
            layer.input_layernorm.variance_epsilon = 0.0
            layer.post_attention_layernorm.variance_epsilon = 0.0
    return model, tok, q


@torch.no_grad()
def test_the_fit_recovers_an_exact_linear_kv_and_pop_then_equals_the_full_model(eval_data):
    """On the tokens of the calibration text (fewer distinct ones than dimensions: the fit is judged on the span
    they cover, the ridge keeps the layer's own projection elsewhere)."""
    model, tok, q = _linear_block_model()
    spec = KVFitSpec(samples=8, length=64, ridge=1e-7, data_dir=str(eval_data))
    maps = KVFitter(model, tok, spec, FINGERPRINT).fit(4, 6)
    ids = calibration(model, tok, spec.calibration()).ids  # (8, 64)
    layer = decoder_of(model).layers[5]
    x = layer.input_layernorm(decoder_of(model).embed_tokens(ids).flatten(0, 1))  # what POP projects there
    for fitted, own in zip(maps.weights[5], (layer.self_attn.k_proj.weight, layer.self_attn.v_proj.weight)):
        torch.testing.assert_close(x @ fitted.T, x @ (own @ q).T, rtol=1e-4, atol=1e-4)
    own_error, fitted_error = maps.meta["relative_error"]["5"]["k"]
    assert own_error > 0.5 and fitted_error < 1e-4
    inputs = {"input_ids": ids[:2, :40], "attention_mask": torch.ones(2, 40, dtype=torch.long)}
    full = model(**inputs).logits[:, -1:]
    attach_kv_maps(model, maps)
    for boundary in ("last", "window-4"):
        calibrated = _first_logits(model, inputs, PopConfig(2, boundary, kv="calibrated"))[:, -1:]
        torch.testing.assert_close(calibrated, full, rtol=1e-4, atol=1e-5)
        own = _first_logits(model, inputs, PopConfig(2, boundary))[:, -1:]
        # The paper's K/V is wrong here (logits of magnitude 0.1 move by about 5e-3); calibration fixes it.
        assert float((own - full).abs().max()) > max(1e-3, 100 * float((calibrated - full).abs().max()))


def test_maps_round_trip_and_refuse_other_weights_and_broken_files(shared, tmp_path):
    model, _ = shared("tiny-qwen3")
    maps = _maps(model, 2, 6, _random(2))
    maps.meta = {"calibration": {"source": "x"}, "ridge": 0.1}
    path = maps.save(tmp_path / "maps.safetensors")
    loaded = KVMaps.load(path, fingerprint=FINGERPRINT, sha256=file_sha256(path))
    assert loaded.block == (2, 6) and loaded.meta == maps.meta
    assert all(torch.equal(a, b) for i in maps.weights for a, b in zip(maps.weights[i], loaded.weights[i]))
    with pytest.raises(DataError, match="was fitted on other weights") as caught:
        KVMaps.load(path, fingerprint="other")
    assert "\n" not in str(caught.value)
    with pytest.raises(DataError, match="does not match its recorded sha256"):
        KVMaps.load(path, sha256="0" * 64)
    with pytest.raises(DataError, match="is missing"):
        KVMaps.load(tmp_path / "none.safetensors")
    (tmp_path / "bad.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(DataError, match="not a readable safetensors file"):
        KVMaps.load(tmp_path / "bad.safetensors")
    with pytest.raises(ConfigError, match="need layers"):
        KVMaps(2, 6, {3: maps.weights[3]}, FINGERPRINT)


def test_maps_of_another_shape_are_refused(shared):
    model, _ = shared("tiny-llama")
    bad = _maps(model, 3, 6, lambda w: torch.zeros(w.shape[0], w.shape[1] + 1))
    with pytest.raises(ConfigError, match="have shapes"):
        attach_kv_maps(model, bad)


def test_calibrated_maps_are_fitted_once_then_loaded(shared, tmp_path, eval_data):
    model, tok = shared("tiny-gemma3")
    model = copy.deepcopy(model)
    spec = KVFitSpec(samples=2, length=32, data_dir=str(eval_data))
    config = PopConfig(3, kv="calibrated")
    fitted = calibrated_kv_maps(model, tok, config, fingerprint=FINGERPRINT, spec=spec, cache_dir=tmp_path)
    files = list(tmp_path.rglob("*.safetensors"))
    assert len(files) == 1 and "block-3-6" in files[0].name
    assert fitted.meta["calibration"]["source"].endswith("valid.txt")
    detach_kv_maps(model)
    again = calibrated_kv_maps(model, tok, config, fingerprint=FINGERPRINT, spec=spec, cache_dir=tmp_path)
    assert again.meta == fitted.meta  # read back, not fitted anew
    assert prepare_kv(model, tok, PopConfig(3), fingerprint=None) is None
    with pytest.raises(ConfigError, match="weights fingerprint"):
        prepare_kv(model, tok, config, fingerprint=None)
    with apply_pop(model, config), torch.no_grad():
        model(**prompt_batch(tok, 20, 1))


def test_accuracy_is_scored_with_the_calibrated_maps(shared, eval_data, monkeypatch):
    """The lm-eval route carries ``kv`` (scored with the maps, not the layers' own K/V), and refuses calibrated
    K/V without maps before any request."""
    from poptune.evaluate import lm as lm_module
    from poptune.evaluate.suite import EvalSpec, measure_tasks

    model, tok = shared("tiny-llama")
    with pytest.raises(ConfigError, match="needs fitted K/V maps"):
        lm_module.PopLM(pretrained=model, tokenizer=tok, skip=3, kv="calibrated")
    seen = []
    original = lm_module.PopLM._loglikelihood_tokens

    def spy(self, requests, *args, **kwargs):
        results = original(self, requests, *args, **kwargs)
        seen.append((self.pop_config.kv, [round(r[0], 6) for r in results]))
        return results

    monkeypatch.setattr(lm_module.PopLM, "_loglikelihood_tokens", spy)
    spec = EvalSpec(tasks=("piqa",), data_dir=eval_data, limit=4, batch_size=4, fidelity=None)
    try:
        attach_kv_maps(model, _maps(model, 3, 6, _random(3)))
        measure_tasks(model, tok, PopConfig(3, kv="own"), spec)
        measure_tasks(model, tok, PopConfig(3, kv="calibrated"), spec)
    finally:
        detach_kv_maps(model)
    assert [kv for kv, _ in seen] == ["own", "calibrated"]
    assert seen[0][1] != seen[1][1]  # the fitted projections changed the scored log-likelihoods
