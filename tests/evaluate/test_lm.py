"""The stage-aware lm-eval model: equal to HFLM at skip=0, exact at skip=1, one prefill per context."""

from __future__ import annotations

import pytest
import torch
from lm_eval.api.instance import Instance
from lm_eval.models.huggingface import HFLM

from poptune import ConfigError, PopConfig, PoptuneError, apply_pop, load_model, remove_pop
from poptune.evaluate.lm import PopLM

PAIRS = [
    ("Question: what is 2+2?\nAnswer:", [" 4", " five", " a rather long answer here"]),
    ("The sky is ", ["blue", "green"]),  # trailing space moves to the continuation (lm-eval's rule)
    ("hello wor", ["ld", "m"]),  # the whole string may tokenize across the split
    ("", [" an empty context"]),
]


def _requests(pairs=PAIRS):
    return [
        Instance(request_type="loglikelihood", doc={}, arguments=(ctx, cont), idx=i)
        for ctx, conts in pairs
        for i, cont in enumerate(conts)
    ]


@pytest.fixture(scope="module", params=["tiny-llama", "tiny-gemma3"])
def tiny(request):
    model, tok = load_model(request.param)
    yield model, tok
    remove_pop(model)


def _hflm(model, tok):
    return HFLM(pretrained=model, tokenizer=tok, batch_size=4, device="cpu")


def _close(a, b, tol=1e-4):
    assert len(a) == len(b)
    for (la, ga), (lb, gb) in zip(a, b):
        assert la == pytest.approx(lb, rel=tol, abs=tol)
        assert ga == gb


def test_skip0_equals_plain_hflm(tiny):
    model, tok = tiny
    reference = _hflm(model, tok).loglikelihood(_requests(), disable_tqdm=True)
    scores = PopLM(pretrained=model, tokenizer=tok, skip=0, batch_size=2).loglikelihood(_requests(), disable_tqdm=True)
    _close(scores, reference)


def test_skip1_equals_the_full_model(tiny):
    model, tok = tiny
    reference = _hflm(model, tok).loglikelihood(_requests(), disable_tqdm=True)
    lm = PopLM(pretrained=model, tokenizer=tok, skip=1, boundary="last", batch_size=3)
    _close(lm.loglikelihood(_requests(), disable_tqdm=True), reference)
    remove_pop(model)


def test_deep_skip_changes_scores(tiny):
    model, tok = tiny
    reference = _hflm(model, tok).loglikelihood(_requests(), disable_tqdm=True)
    lm = PopLM(pretrained=model, tokenizer=tok, skip=4, boundary="none", batch_size=3)
    scores = lm.loglikelihood(_requests(), disable_tqdm=True)
    remove_pop(model)
    assert any(abs(a[0] - b[0]) > 1e-3 for a, b in zip(scores, reference))


def test_split_is_lm_evals(tiny):
    model, tok = tiny
    hf, pop = _hflm(model, tok), PopLM(pretrained=model, tokenizer=tok, skip=2)
    remove_pop(model)
    for ctx, conts in PAIRS[:3]:
        for cont in conts:
            assert pop._encode_pair(ctx, cont) == hf._encode_pair(ctx, cont)


def test_one_prefill_per_context(tiny):
    """Every context is prefilled exactly once, however many choices it has."""
    model, tok = tiny
    lm = PopLM(pretrained=model, tokenizer=tok, skip=2, batch_size=8)
    prefills = []

    def count(module, args, kwargs):
        cache = kwargs.get("cache")
        if cache is None or cache.get_seq_length() == 0:
            prefills.append(kwargs["input_ids"].shape[0])

    handle = model.register_forward_pre_hook(count, with_kwargs=True)
    try:
        lm.loglikelihood(_requests(), disable_tqdm=True)
    finally:
        handle.remove()
        remove_pop(model)
    assert prefills == [len(PAIRS)]  # one batched prefill holding each distinct context once


def test_generate_until_uses_pop(tiny):
    model, tok = tiny
    config = PopConfig(skip=3, boundary="last")
    lm = PopLM(pretrained=model, tokenizer=tok, skip=3, batch_size=2, max_gen_toks=6)
    request = Instance(
        request_type="generate_until", doc={}, idx=0,
        arguments=("Once upon a time", {"until": ["\n\n"], "do_sample": False, "max_gen_toks": 6}),
    )
    (text,) = lm.generate_until([request], disable_tqdm=True)
    inputs = tok(["Once upon a time"], return_tensors="pt")
    with apply_pop(model, config), torch.no_grad():
        expected = model.generate(**inputs, max_new_tokens=6, do_sample=False)
    assert text == tok.decode(expected[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    remove_pop(model)


def test_request_cache_is_per_configuration(tiny, tmp_path):
    from lm_eval.api.model import CachingLM

    model, tok = tiny
    lm = PopLM(pretrained=model, tokenizer=tok, skip=2)
    with pytest.raises(ConfigError, match="pop-skip2-last-off0"):
        CachingLM(lm, str(tmp_path / "shared.db"))
    cached = CachingLM(lm, str(tmp_path / f"{lm.config_tag}.db"))
    first = cached.loglikelihood(_requests())
    again = cached.loglikelihood(_requests())
    remove_pop(model)
    assert first == again


def test_bad_arguments(tiny):
    model, tok = tiny
    for bad in ({"skip": "x"}, {"layers": "1-y"}, {"batch_size": "auto"}, {"batch_size": "0"}):
        with pytest.raises(ConfigError, match="PopLM"):
            PopLM(pretrained=model, tokenizer=tok, **bad)
    with pytest.raises(ConfigError, match="needs `tokenizer`"):
        PopLM(pretrained=model)
    with pytest.raises(ConfigError, match="`boundary`"):
        PopLM(pretrained=model, tokenizer=tok, skip=1, boundary="first")
    with pytest.raises(ConfigError, match="`skip` must be in"):
        PopLM(pretrained=model, tokenizer=tok, skip=99)


def test_registered_with_lm_eval():
    from lm_eval.api.registry import get_model

    assert get_model("poptune") is PopLM


def test_the_model_passed_in_is_handed_back_as_it_was(tiny):
    """POP is applied only while PopLM scores or generates: the caller's model keeps its own state."""
    from poptune import get_pop_config

    model, tok = tiny
    lm = PopLM(pretrained=model, tokenizer=tok, skip=3, boundary="none", batch_size=2)
    assert get_pop_config(model) is None
    lm.loglikelihood(_requests(), disable_tqdm=True)
    assert get_pop_config(model) is None
    with apply_pop(model, PopConfig(skip=1)):  # a configuration of the caller's own survives PopLM's
        lm.loglikelihood(_requests()[:2], disable_tqdm=True)
        assert get_pop_config(model) == PopConfig(skip=1)


def test_prefill_chunk_scores_and_generates_the_same(tiny):
    model, tok = tiny
    request = Instance(request_type="generate_until", doc={}, idx=0,
                       arguments=("Once upon a time there was", {"until": ["\n\n"], "do_sample": False}))
    results = []
    for chunk in (None, 3):
        lm = PopLM(pretrained=model, tokenizer=tok, skip=3, boundary="window-4", batch_size=2, max_gen_toks=4,
                   prefill_chunk=chunk)
        results.append((lm.loglikelihood(_requests(), disable_tqdm=True), lm.generate_until([request], True)))
    (whole, text), (chunked, chunked_text) = results
    _close(chunked, whole, tol=1e-5)
    assert chunked_text == text
    with pytest.raises(ConfigError, match="`prefill_chunk` must be an integer >= 1"):
        PopLM(pretrained=model, tokenizer=tok, skip=1, prefill_chunk=0)


def test_calibrated_kv_from_model_args_fits_then_reads_the_maps(eval_data, monkeypatch):
    """Issue 33, case 8: `--model_args ...,kv=calibrated` was refused with a pointer to the Python API; now the maps
    are read from the cache or fitted there first, as a study does."""
    from poptune.engine import decoder_of
    from poptune.kv import calibrated
    from poptune.kvfit.fit import KVFitter

    monkeypatch.setenv("POPTUNE_DATA", str(eval_data))
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        monkeypatch.setenv("POPTUNE_KV_MAPS", folder)
        lm = PopLM.create_from_arg_string("pretrained=tiny-llama,skip=3,kv=calibrated", {"device": "cpu"})
        maps = calibrated.SOURCE.held(decoder_of(lm.model))[(3, 6)]
        assert lm.pop_config.kv == "calibrated" and maps.path is not None and maps.path.is_file()
        monkeypatch.setattr(KVFitter, "fit", lambda *a: pytest.fail("fitted again instead of read from the cache"))
        again = PopLM.create_from_arg_string("pretrained=tiny-llama,skip=3,kv=calibrated", {"device": "cpu"})
        assert calibrated.SOURCE.held(decoder_of(again.model))[(3, 6)].path == maps.path
        scores = again.loglikelihood(_requests(), disable_tqdm=True)
        assert len(scores) == len(_requests())


@pytest.mark.skipif(torch.cuda.is_available(), reason="lm-eval's default CUDA device falls back only without CUDA")
def test_lm_evals_default_cuda_device_falls_back_to_the_cpu(caplog):
    """Issue 33, case 8: lm-eval's default device is cuda:0, which ended in a DeviceError traceback on a CPU
    machine; it falls back to the CPU with one warning, as lm-eval's own HFLM does for a device it does not know."""
    import logging

    with caplog.at_level(logging.WARNING, logger="poptune.evaluate.lm"):
        lm = PopLM.create_from_arg_string("pretrained=tiny-llama,skip=1", {"device": "cuda:0", "batch_size": None})
    assert lm.model.device.type == "cpu"
    assert [r.getMessage() for r in caplog.records if "CUDA is not available" in r.getMessage()]
    with pytest.raises(PoptuneError):  # a device named explicitly is not replaced
        PopLM.create_from_arg_string("pretrained=tiny-llama,skip=1", {"device": "cuda:3"})


@pytest.mark.parametrize("model_args", ["pretrained=tiny-llama,layers=1-y", "pretrained=no-such-model,skip=1"])
def test_the_routes_errors_are_one_line(eval_data, monkeypatch, capsys, model_args):
    """``python -m poptune.evaluate.harness``: a poptune error ends lm-eval's run in one line, exit code 2."""
    import sys

    from poptune.evaluate import harness

    monkeypatch.setenv("POPTUNE_DATA", str(eval_data))
    monkeypatch.setattr("lm_eval.__main__.setup_logging", lambda: None)  # its handler would outlive the test
    monkeypatch.setattr(sys, "argv", ["lm_eval", "run", "--model", "poptune", "--model_args", model_args,
                                      "--tasks", "piqa", "--limit", "2", "--device", "cpu"])
    with pytest.raises(SystemExit) as exit_:
        harness.main()
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("poptune harness: error: ")
