"""The one calibration module: text from WikiText-2 windows or sampled from the model, and what the model computes
on it (residual stream, NLL, sampled continuations); tiny random models, seconds."""

from __future__ import annotations

import pytest
import torch

from poptune import DataError, load_model
from poptune.errors import ConfigError
from poptune.files import typed_path
from poptune.kvfit.calibration import (
    GENERATED,
    Calibration,
    CalibrationSpec,
    calibration,
    calibration_file,
    calibration_nll,
    calibration_text,
    residual_stream,
    sample_continuations,
    sample_tokens,
)


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-llama")


def _text(tiny, **kwargs):
    model, tok = tiny
    args = dict(samples=3, length=16, batch_size=2, data_dir=None, sampler=torch.Generator().manual_seed(0))
    return calibration_text(model, tok, **{**args, **kwargs})


def test_calibration_is_seeded_and_recorded(tiny, eval_data):
    model, tok = tiny
    spec = CalibrationSpec(samples=3, length=16, seed=1, data_dir=str(eval_data))
    one, again = calibration(model, tok, spec), calibration(model, tok, spec)
    other = calibration(model, tok, CalibrationSpec(samples=3, length=16, seed=2, data_dir=str(eval_data)))
    assert one.ids.shape == (3, 16) and torch.equal(one.ids, again.ids) and not torch.equal(one.ids, other.ids)
    source = typed_path(str(eval_data / "wikitext-2" / "test.txt"))  # recorded as typed: no path of this machine
    assert one.describe() == {"samples": 3, "length": 16, "seed": 1, "source": source} and not source.startswith("/")


def test_calibration_without_data_is_generated(tiny, monkeypatch):
    monkeypatch.delenv("POPTUNE_DATA", raising=False)
    model, tok = tiny
    calib = calibration(model, tok, CalibrationSpec(samples=2, length=8, seed=0))
    assert calib.ids.shape == (2, 8) and calib.source == GENERATED
    assert (calib.ids[:, 0] == tok.bos_token_id).all()


def test_windows_start_with_bos_and_follow_the_text(tiny, eval_data):
    model, tok = tiny
    ids, source = _text(tiny, data_dir=eval_data)
    text = tok(calibration_file(eval_data).read_text(encoding="utf-8"), add_special_tokens=False)["input_ids"]
    assert source == typed_path(str(eval_data / "wikitext-2" / "test.txt")) and ids.shape == (3, 16)
    assert (ids[:, 0] == tok.bos_token_id).all()
    assert ids[0, 1:].tolist() == text[:15] and ids[-1, 1:].tolist() == text[-15:]  # evenly spaced: ends included


def test_drawn_offsets_are_seeded(tiny, eval_data):
    one, _ = _text(tiny, data_dir=eval_data, offsets=torch.Generator().manual_seed(4))
    again, _ = _text(tiny, data_dir=eval_data, offsets=torch.Generator().manual_seed(4))
    spaced, _ = _text(tiny, data_dir=eval_data)
    assert torch.equal(one, again) and not torch.equal(one, spaced)


def test_generated_text_follows_the_sampler(tiny, monkeypatch):
    monkeypatch.delenv("POPTUNE_DATA", raising=False)
    one, source = _text(tiny)
    again, _ = _text(tiny)
    other, _ = _text(tiny, sampler=torch.Generator().manual_seed(1))
    assert source == GENERATED and one.shape == (3, 16)
    assert torch.equal(one, again) and not torch.equal(one, other)


def test_too_short_a_text_and_a_missing_file_are_data_errors(tiny, tmp_path, monkeypatch):
    (tmp_path / "wikitext-2").mkdir()
    (tmp_path / "wikitext-2" / "test.txt").write_text("a b c", encoding="utf-8")
    with pytest.raises(DataError, match="fewer than one calibration window"):
        _text(tiny, data_dir=tmp_path)
    with pytest.raises(DataError):
        calibration_file(tmp_path / "absent")
    monkeypatch.delenv("POPTUNE_DATA", raising=False)
    assert calibration_file(None) is None


def test_windows_lie_inside_their_region(tiny, eval_data):
    """Evenly spaced or drawn, every window of a region lies in its share of the text's tokens (ends included when
    spaced), so windows of two regions that meet share no token; a region too short for a window is a DataError."""
    model, tok = tiny
    text = tok(calibration_file(eval_data).read_text(encoding="utf-8"), add_special_tokens=False)["input_ids"]
    cut = round(0.75 * len(text))
    spaced, _ = _text(tiny, data_dir=eval_data, samples=5, region=(0.75, 1.0))
    assert spaced[0, 1:].tolist() == text[cut : cut + 15] and spaced[-1, 1:].tolist() == text[-15:]
    for region, (first, end) in (((0.0, 0.75), (0, cut)), ((0.75, 1.0), (cut, len(text)))):
        drawn, _ = _text(tiny, data_dir=eval_data, samples=40, region=region, offsets=torch.Generator().manual_seed(0))
        inside = {tuple(text[s : s + 15]) for s in range(first, end - 14)}
        assert all(tuple(row[1:].tolist()) in inside for row in drawn)
    with pytest.raises(DataError, match="in the region 0.999-1"):
        _text(tiny, data_dir=eval_data, region=(0.999, 1.0))


@pytest.mark.parametrize("bad", [dict(samples=0), dict(length=1), dict(batch_size=True), dict(samples=2.0),
                                 dict(region=(0.5, 0.5)), dict(region=(-0.1, 1.0)), dict(region=[0.0, 1.0])])
def test_spec_validates(bad):
    with pytest.raises(ConfigError):
        CalibrationSpec(**bad)


def test_residual_stream_and_nll(tiny, eval_data):
    model, tok = tiny
    calib = calibration(model, tok, CalibrationSpec(samples=3, length=12, seed=0, data_dir=str(eval_data),
                                                    batch_size=2))
    assert [len(b) for b in calib.batches()] == [2, 1]
    states = residual_stream(model, calib)
    layers = model.config.num_hidden_layers
    assert states.shape == (layers + 1, 3, 12, model.config.hidden_size) and states.dtype == torch.float32
    with torch.inference_mode():
        hidden = model.model(input_ids=calib.ids, output_hidden_states=True).hidden_states
        logits = model(input_ids=calib.ids).logits[:, :-1].float()
    torch.testing.assert_close(states[0], hidden[0].float())
    expected = torch.nn.functional.cross_entropy(logits.flatten(0, 1), calib.ids[:, 1:].flatten())
    assert calibration_nll(model, calib) == pytest.approx(float(expected), rel=1e-5)


def test_sampled_continuations_extend_the_prompt_reproducibly(tiny):
    model, _ = tiny
    prompts = torch.randint(0, model.config.vocab_size, (2, 5), generator=torch.Generator().manual_seed(0))
    one = sample_continuations(model, prompts, 4, generator=torch.Generator().manual_seed(3))
    again = sample_continuations(model, prompts, 4, generator=torch.Generator().manual_seed(3))
    assert one.shape == (2, 9) and torch.equal(one[:, :5], prompts) and torch.equal(one, again)
    with torch.inference_mode():
        out = model(input_ids=prompts, use_cache=True, logits_to_keep=1)
        tokens = sample_tokens(model, out.logits, out.cache, 4, torch.Generator().manual_seed(3))
    assert torch.equal(tokens, one[:, 5:])


def test_describe_leaves_out_where_and_how_fast(tiny):
    calib = Calibration(torch.zeros(2, 4, dtype=torch.long), "here", CalibrationSpec(samples=2, length=4, data_dir="x"))
    assert calib.describe() == {"samples": 2, "length": 4, "seed": 0, "source": "here"}
    part = Calibration(calib.ids, "here", CalibrationSpec(samples=2, length=4, region=(0.75, 1.0)))
    assert part.describe()["region"] == [0.75, 1.0]
