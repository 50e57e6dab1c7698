"""Fidelity to the full model: exact where POP is exact, positive divergence where it approximates."""

import pytest

from poptune import ConfigError, DataError, PopConfig, get_pop_config, load_model
from poptune.evaluate.fidelity import FidelitySpec, fidelity_pairs, generated_text, measure_fidelity, wikitext

TEXT = " ".join(f"Sentence number {i} tells a small story about item {i * 7 % 13}." for i in range(80))


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-qwen3")


def test_pairs_are_evenly_spaced_and_fixed(tiny):
    _, tok = tiny
    spec = FidelitySpec(context_tokens=40, continuation_tokens=8, pairs=5)
    pairs = fidelity_pairs(tok, TEXT, spec)
    assert pairs == fidelity_pairs(tok, TEXT, spec)
    assert len(pairs) == 5
    assert all(len(c) == 41 and len(t) == 8 for c, t in pairs)  # BOS + context
    ids = tok(TEXT, add_special_tokens=False)["input_ids"]
    assert pairs[0][0][1:] == ids[:40] and pairs[-1][1] == ids[-8:]


def test_exact_configurations_have_full_fidelity(tiny):
    model, tok = tiny
    pairs = fidelity_pairs(tok, TEXT, FidelitySpec(context_tokens=40, continuation_tokens=6, pairs=4))
    for config in (PopConfig(skip=0), PopConfig(skip=1)):
        result = measure_fidelity(model, tok, config, pairs, batch_size=3)
        assert result.top1_agreement == 1.0
        assert result.kl == pytest.approx(0.0, abs=1e-6)
        assert result.nll_pop == pytest.approx(result.nll_full, abs=1e-5)
        assert len(result.per_position["kl"]) == 6
    assert get_pop_config(model) is None


def test_deep_skip_diverges(tiny):
    model, tok = tiny
    pairs = fidelity_pairs(tok, TEXT, FidelitySpec(context_tokens=40, continuation_tokens=6, pairs=4))
    result = measure_fidelity(model, tok, PopConfig(skip=4, boundary="none"), pairs)
    assert result.kl > 1e-6
    assert result.to_dict()["ppl_pop"] == pytest.approx(result.ppl_pop)


def test_errors(tiny, tmp_path):
    _, tok = tiny
    with pytest.raises(ConfigError, match="fewer than one pair needs"):
        fidelity_pairs(tok, "too short", FidelitySpec(context_tokens=40, continuation_tokens=8, pairs=2))
    with pytest.raises(DataError, match="wikitext-2/test.txt is missing"):
        wikitext(tmp_path)
    with pytest.raises(ConfigError, match="`pairs` must be a positive integer"):
        FidelitySpec(pairs=0)


def test_generated_text_is_seeded(tiny):
    model, tok = tiny
    assert generated_text(model, tok, 16, seed=3) == generated_text(model, tok, 16, seed=3)
