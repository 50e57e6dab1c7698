"""Calibrated K/V for the skipped block: the fit, the engine's use of the maps, their files."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from poptune import ConfigError, DataError, PopConfig, apply_pop, load_model
from poptune.engine import decoder_of
from poptune.engine.segments import generate, prefill_prompt
from poptune.kv.maps import KVMaps, file_sha256
from poptune.kvfit.calibration import calibration
from poptune.kvfit.fit import KVFitSpec, KVFitter
from poptune.kvfit.prepare import attach_kv_maps, detach_kv_maps, prepare_kv
from poptune.measure.timing_prompts import prompt_batch
from poptune.models.configs import tiny_names

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
    spec = KVFitSpec(samples=8, length=64, short_samples=0, holdout=0, ridge=1e-7, data_dir=str(eval_data))
    maps = KVFitter(model, tok, spec, FINGERPRINT).fit(4, 6)
    ids = calibration(model, tok, spec.calibrations()[0][0]).ids  # (8, 64): the fit windows
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
    fitted = prepare_kv(model, tok, config, fingerprint=FINGERPRINT, spec=spec, cache_dir=tmp_path)
    files = list(tmp_path.rglob("*.safetensors"))
    assert len(files) == 1 and "block-3-6" in files[0].name
    assert fitted.meta["calibration"]["source"].endswith("valid.txt")
    detach_kv_maps(model)
    again = prepare_kv(model, tok, config, fingerprint=FINGERPRINT, spec=spec, cache_dir=tmp_path)
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


def _sink_model(name="tiny-llama", scale=200.0):
    """A tiny model whose BOS behaves as an attention sink does in Gemma-3: its embedding row scaled so that
    its residual stream is far larger than every other token's."""
    model, tok = load_model(name)
    bos = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
    with torch.no_grad():
        decoder_of(model).embed_tokens.weight[bos] *= scale
    return model, tok, bos


@torch.no_grad()
def _calibrated_cache(model, maps, ids):
    """The POP cache of ``ids`` (skip 3, no boundary) with ``maps`` attached for it, detached after."""
    attach_kv_maps(model, maps)
    try:
        return _cache_kv(model, ids, PopConfig(3, "none", kv="calibrated"))
    finally:
        detach_kv_maps(model)


def _cache_kv(model, ids, config):
    with apply_pop(model, config):
        out = model(input_ids=ids, use_cache=True)
    return out.cache


@torch.no_grad()
def test_sink_tokens_are_found_by_their_norm_and_written_apart(eval_data):
    """The fit finds the sink (BOS, scaled) by its block-entry norm; in the engine, a sink token writes its K/V
    through the sink maps (the layer's own where the maps hold none) and every other token through the fitted
    maps, at whatever position the sink is (left padding)."""
    model, tok, bos = _sink_model()
    spec = KVFitSpec(samples=4, length=32, short_samples=4, short_length=24, data_dir=str(eval_data), sink="fitted",
                     holdout=0)  # the maps as fitted, unchecked (the check has tests of its own)
    fitter = KVFitter(model, tok, spec, FINGERPRINT)
    fitter._residual()
    threshold = fitter.sink_norm(3)
    assert threshold is not None
    plain, plain_tok = load_model("tiny-llama")
    assert KVFitter(plain, plain_tok, spec, FINGERPRINT).sink_norm(3) is None  # no sink: no threshold
    default = KVFitter(model, tok, dataclasses.replace(spec, sink="none"), FINGERPRINT)
    assert default.fit(3, 6).sink_norm is None  # the default: one map for every token, the sink included
    maps = fitter.fit(3, 6)
    assert maps.sink_norm == threshold and set(maps.sinks) == {4, 5} and maps.meta["sink_tokens"] == 8
    body = torch.tensor(tok("the cat sat on the mat and", add_special_tokens=False)["input_ids"][:6])
    ids = torch.cat([torch.tensor([bos]), body]).unsqueeze(0)  # (1, 7)
    own_cache = _cache_kv(model, ids, PopConfig(3, "none"))
    random = _maps(model, 3, 6, _random(0))
    for sinks, sink_equals_own in (({}, True), ({i: random.weights[i] for i in (4, 5)}, False)):
        random.sinks, random.sink_norm = sinks, threshold
        cache = _calibrated_cache(model, random, ids)
        for i in (4, 5):
            for got, own in ((cache.layers[i].keys, own_cache.layers[i].keys),
                             (cache.layers[i].values, own_cache.layers[i].values)):
                assert torch.equal(got[:, :, 0], own[:, :, 0]) == sink_equals_own  # the sink
                assert not torch.allclose(got[:, :, 1:], own[:, :, 1:])  # the rest: the fitted maps
    # Fitted sink maps (not random ones) bring the sink's K/V closer to the full model's than its own do.
    full = model(input_ids=ids, use_cache=True).cache
    cache = _calibrated_cache(model, maps, ids)
    for i in (4, 5):
        truth = full.layers[i].values[:, :, 0]
        assert float((cache.layers[i].values[:, :, 0] - truth).norm()) < float(
            (own_cache.layers[i].values[:, :, 0] - truth).norm())


def test_maps_round_trip_with_their_sink_maps(shared, tmp_path):
    model, _ = shared("tiny-qwen3")
    maps = _maps(model, 2, 5, _random(1))
    maps.sinks, maps.sink_norm = {3: maps.weights[4]}, 12.5
    loaded = KVMaps.load(maps.save(tmp_path / "m.safetensors"))
    assert loaded.sink_norm == 12.5 and set(loaded.sinks) == {3}
    assert all(torch.equal(a, b) for a, b in zip(loaded.sinks[3], maps.weights[4]))
    with pytest.raises(ConfigError, match="sink maps of block"):
        KVMaps(2, 5, maps.weights, FINGERPRINT, sinks={5: maps.weights[4]})


@torch.no_grad()
def test_a_block_whose_maps_are_no_better_keeps_its_own_projections(eval_data):
    """The validation fallback. Layers whose own projection is already exact (the block's layers add nothing to
    the residual stream): the fitted maps cannot beat them on held-out text, so the check finds them not better
    and the block keeps its layers' own projections (calibrated K/V then equal the paper's), saying so."""
    model, tok = load_model("tiny-llama")
    for layer in decoder_of(model).layers[3:]:
        layer.self_attn.o_proj.weight.zero_()
        layer.mlp.down_proj.weight.zero_()
    spec = KVFitSpec(samples=8, length=32, short_samples=8, short_length=24, ridge=1e-2, data_dir=str(eval_data))
    maps = KVFitter(model, tok, spec, FINGERPRINT).fit(3, 6)
    validation = maps.meta["validation"]
    assert maps.meta["kept_own"] == "all (block)" and not validation["keep"] and validation["verdict"] == "undecided"
    assert validation["windows"] == 4 and validation["p"] >= spec.alpha
    layers = decoder_of(model).layers
    for i in (4, 5):
        assert torch.equal(maps.weights[i][0], layers[i].self_attn.k_proj.weight)
        assert torch.equal(maps.weights[i][1], layers[i].self_attn.v_proj.weight)
        held_own, held_fitted = maps.meta["relative_error"][str(i)]["held_k"]
        assert held_own < 1e-6 and held_fitted > held_own  # reported, not used to choose


@torch.no_grad()
def test_the_check_decides_on_held_out_windows_at_its_level(eval_data, monkeypatch):
    """The block-level check scores every held-out window at its continuation points with own and calibrated
    K/V, and keeps the maps exactly when its one-sided test rejects "not better" at ``alpha``; a block whose
    maps are kept uses them, one whose maps are not keeps its own (no sink maps, no threshold)."""
    import poptune.kvfit.check as kvcheck

    model, tok = load_model("tiny-llama")
    spec = KVFitSpec(samples=4, length=40, short_samples=8, short_length=24, data_dir=str(eval_data), points=4)
    fitter = KVFitter(model, tok, spec, FINGERPRINT)
    calls = []
    real = kvcheck.continuation_nll
    monkeypatch.setattr(kvcheck, "continuation_nll", lambda m, c, ids, n: calls.append((c.kv, ids.shape)) or real(
        m, c, ids, n))
    honest = fitter.fit(3, 6)
    validation = honest.meta["validation"]
    assert validation["windows"] == 3 and validation["continuation"] == 16 and validation["points"] == 4
    assert sorted(set(calls)) == [("calibrated", (1, 40)), ("calibrated", (2, 24)), ("own", (1, 40)), ("own", (2, 24))]
    assert validation["keep"] == (validation["p"] < spec.alpha)
    assert validation["calibrated_minus_own"] == pytest.approx(validation["calibrated_nll"] - validation["own_nll"])
    for p, kept in ((0.01, True), (0.2, False)):
        monkeypatch.setattr("poptune.kvfit.fit.keep_maps", lambda diffs, alpha, p=p: {"keep": p < alpha, "p": p})
        maps = fitter.fit(3, 6)
        layers = decoder_of(model).layers
        own = all(torch.equal(maps.weights[i][0], layers[i].self_attn.k_proj.weight) for i in (4, 5))
        assert own != kept and maps.meta["kept_own"] == ([] if kept else "all (block)")
        assert maps.sinks == {} and maps.sink_norm is None


def _covered(calib, text):
    """The token positions of ``text`` the windows of ``calib`` (BOS dropped) cover, at every place each one fits."""
    covered = set()
    for row in calib.ids[:, 1:].tolist():
        starts = [s for s in range(len(text) - len(row) + 1) if text[s : s + len(row)] == row]
        assert starts, "a window that is not a cut of the text"
        covered.update(i for s in starts for i in range(s, s + len(row)))
    return covered


@torch.no_grad()
def test_held_out_windows_share_no_token_with_any_fit_window(eval_data):
    """Sixty-four windows at random offsets of a 3,721-token text overlap one another, so held-out windows drawn
    like the fit ones would share text with them and the check would score text the fit saw. Held out: every
    4th window, as many as before (4 long, 12 short), all from a region of the text no fit window touches."""
    model, tok = load_model("tiny-llama")
    spec = KVFitSpec(samples=16, length=128, short_samples=48, short_length=64, data_dir=str(eval_data))
    texts = KVFitter(model, tok, spec, FINGERPRINT).texts()
    text = tok((eval_data / "wikitext-2" / "valid.txt").read_text(encoding="utf-8"), add_special_tokens=False)
    text = text["input_ids"]
    counts = {(length, out): sum(len(c.ids) for c, o in texts if o == out and c.ids.shape[1] == length)
              for length in (128, 64) for out in (False, True)}
    assert counts == {(128, False): 12, (128, True): 4, (64, False): 36, (64, True): 12}
    fit = set().union(*(_covered(c, text) for c, out in texts if not out))
    held = set().union(*(_covered(c, text) for c, out in texts if out))
    assert held and fit and not fit & held
    again = KVFitter(model, tok, spec, FINGERPRINT).texts()
    assert all(torch.equal(a.ids, b.ids) for (a, _), (b, _) in zip(texts, again))  # seeded


def test_the_study_calibration_split_is_disjoint_from_every_scored_item(shared, eval_data):
    """The K/V calibration prompts of a study are its tasks' documents it never scores (racing and certification
    take a prefix of the fixed order; these come from its end), and say so."""
    from poptune.evaluate.workload import build_workload, calibration_prompts, task_prompts

    _, tok = shared("tiny-llama")
    workload = build_workload(tok, ("piqa",), data_dir=eval_data, cap=4)
    prompts, source = calibration_prompts(tok, workload, data_dir=eval_data, count=3, max_tokens=4096)
    texts = task_prompts(("piqa",), eval_data)["piqa"]
    scored = {texts[i] for i in workload.order["piqa"]}
    assert len(prompts) == 3 and not scored & set(prompts)
    assert source.startswith("study workload calibration split: piqa: 3 prompts, the last 3 of ")
    spec = KVFitSpec(prompts=tuple(prompts * 4), prompts_source=source, short_samples=0)
    fitter = KVFitter(shared("tiny-llama")[0], tok, spec, FINGERPRINT)
    maps = fitter.fit(3, 6)
    assert maps.meta["calibration"]["source"] == source and maps.meta["calibration"]["prompts"] == 12


def test_the_calibration_split_takes_every_task_in_turn(shared, eval_data):
    """With two tasks, the calibration prompts alternate between them, so a fit that stops at its token budget
    still holds both tasks' content (before, the first task's prompts filled the budget alone)."""
    from poptune.evaluate.workload import build_workload, calibration_prompts, task_prompts

    _, tok = shared("tiny-llama")
    tasks = ("piqa", "arc_easy")
    workload = build_workload(tok, tasks, data_dir=eval_data, cap=4)
    prompts, _ = calibration_prompts(tok, workload, data_dir=eval_data, count=3, max_tokens=4096)
    texts = task_prompts(tasks, eval_data)
    owner = [next(t for t in tasks if p in texts[t]) for p in prompts]
    assert owner == ["piqa", "arc_easy"] * 3
