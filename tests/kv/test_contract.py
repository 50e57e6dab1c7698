"""The K/V source contract (issue 60, item 2), run over every registered source, as Optuna runs its sampler tests over
every sampler: a new source is one module and one registry line, and these tests then hold it to the contract
(:class:`poptune.kv.source.KVSource`) with nothing else to write.

What every source must do, whatever it keeps: be found by its name and named consistently; refuse what it cannot
run with a :class:`ConfigError` only; count no more kept tokens than were pruned; be the default source below its
``min_skip``; be made ready by the one preparation path (a fitter handed down, its details JSON); run a left-padded
prefill and a decode from its cache through the hooks the engine calls (``boundary_mask``, ``cache_context``); and
leave the model as it found it.
"""

from __future__ import annotations

import copy
import json
import re
from types import SimpleNamespace

import pytest
import torch

from poptune.engine import PopConfig, apply_pop, decoder_of
from poptune.engine.segments import prefill_prompt
from poptune.errors import ConfigError
from poptune.kv import registry
from poptune.kv.maps import KVMaps
from poptune.kv.source import KVSource, source_of
from poptune.kvfit.prepare import kv_details, prepare_kv
from poptune.measure.prefill import decode

SOURCES = pytest.mark.parametrize("source", registry.SOURCES, ids=lambda s: s.name)
MODELS = ("tiny-llama", "tiny-gemma3")  # tiny-gemma3: sliding-window layers shorter than the prompt
N = 24  # prompt tokens (tiny-gemma3's window is 8)


class _OwnFitter:
    """A fitter (:class:`poptune.kv.source.Fitter`) whose maps are the layers' own projections: any source that
    fits maps is then made ready without calibration text."""

    def __init__(self, model):
        self.model = model
        self.spec = SimpleNamespace(source=lambda: "the layers' own projections (a contract test)")

    def cache_tag(self) -> str:
        return "contract"

    def fit(self, start: int, stop: int) -> KVMaps:
        layers = decoder_of(self.model).layers
        weights = {i: (layers[i].self_attn.k_proj.weight.detach().clone(),
                       layers[i].self_attn.v_proj.weight.detach().clone()) for i in range(start + 1, stop)}
        return KVMaps(start, stop, weights, f"contract-{id(self.model)}")


def _prepared(model, tok, config, tmp_path):
    """``config``'s source made ready on ``model`` by the one preparation path; what it attached."""
    return prepare_kv(model, tok, config, fingerprint=f"contract-{id(model)}", cache_dir=tmp_path,
                      fitter=lambda: _OwnFitter(model))


def _prompts() -> dict[str, torch.Tensor]:
    ids = torch.randint(5, 250, (2, N), generator=torch.Generator().manual_seed(11))
    mask = torch.ones_like(ids)
    ids[1, :5], mask[1, :5] = 0, 0  # left padding: row 1's first real token is at column 5
    return {"input_ids": ids, "attention_mask": mask}


def _patched(model) -> list[str]:
    """Modules of ``model`` whose forward is an instance attribute (a patch, if one was left behind)."""
    return [name for name, module in model.named_modules() if "forward" in vars(module)]


@SOURCES
def test_a_source_is_found_by_its_name_and_named_consistently(source):
    assert isinstance(source, KVSource) and registry.source(source.name) is source
    assert re.fullmatch(r"[a-z][a-z0-9_]*", source.name)
    assert (source.label == "" and source.tag == "") == registry.is_default(source.name)  # the paper's needs no word
    assert source.tag == "" or re.fullmatch(r"[a-z0-9]+", source.tag)  # in file names
    assert source.help and "\n" not in source.help
    assert isinstance(source.min_skip, int) and source.min_skip >= 1
    assert (source.export_key is None) == (source.export_suffix == "")
    assert sum(s.name == source.name for s in registry.SOURCES) == 1 and registry.NAMES.count(source.name) == 1


@SOURCES
def test_a_source_refuses_what_it_cannot_run_with_a_config_error_only(source):
    ran = 0
    for skip in range(4):
        for boundary in ("none", "last", "window-4"):
            for offset, layers in ((0, None), (1, None), (0, (0, 2) if skip == 2 else None)):
                try:
                    config = PopConfig(skip, boundary, offset, layers, kv=source.name)
                except ConfigError:
                    continue
                ran += 1
                assert PopConfig.from_dict(config.to_dict()) == config  # stored and read back with its source
    assert ran  # some configuration runs


@SOURCES
def test_a_source_keeps_no_more_tokens_than_were_pruned(source):
    kept = [source.kept(p) for p in range(65)]
    assert all(0 <= k <= p for p, k in enumerate(kept)) and kept == sorted(kept)


@SOURCES
@pytest.mark.parametrize("name", MODELS)
def test_a_source_prefills_and_decodes_through_the_engines_hooks(source, name, shared, tmp_path):
    """A left-padded prefill under the source, then decode from its cache by the plain model: every layer's cache
    saw every prompt token, the cache is marked by no source or by this one, and nothing stays patched."""
    model, tok = shared(name)
    model = copy.deepcopy(model)  # prepared sources attach to the model: never to the shared one
    inputs = _prompts()
    layers, patched = len(decoder_of(model).layers), _patched(model)
    config = PopConfig(max(3, source.min_skip), "window-4", kv=source.name)
    prepared = _prepared(model, tok, config, tmp_path)
    details = kv_details(config, prepared)
    assert json.loads(json.dumps(details)) == details
    assert all(isinstance(line, str) for line in source.report_lines([details]))
    with torch.no_grad():
        before = model(**inputs).logits[:, -1]
        with apply_pop(model, config):
            out = prefill_prompt(model, inputs)
        assert out.logits.shape[:2] == (2, 1) and torch.isfinite(out.logits).all()
        assert source_of(out.cache) in (None, source)
        assert len(out.cache.layers) == layers and all(c.get_seq_length() == N for c in out.cache.layers)
        decode(model, out, inputs, 3)
        assert all(c.get_seq_length() == N + 3 for c in out.cache.layers)
        assert _patched(model) == patched
        torch.testing.assert_close(model(**inputs).logits[:, -1], before, rtol=0, atol=0)


@SOURCES
def test_below_its_min_skip_a_source_is_the_default(source, shared, tmp_path):
    """The search space reads a source as the default below its ``min_skip`` (:func:`registry.distinct_at`): the
    source must then write exactly the default's K/V."""
    model, tok = shared("tiny-llama")
    model = copy.deepcopy(model)
    inputs = _prompts()
    for skip in range(1, source.min_skip):
        assert registry.distinct_at(skip, [source.name]) == (registry.DEFAULT,)
        config = PopConfig(skip, "last", kv=source.name)
        _prepared(model, tok, config, tmp_path)
        with torch.no_grad():
            with apply_pop(model, config):
                got = prefill_prompt(model, inputs).logits
            with apply_pop(model, PopConfig(skip, "last")):
                want = prefill_prompt(model, inputs).logits
        torch.testing.assert_close(got, want, rtol=0, atol=0)
