"""Names to (model, tokenizer): resolution, loading tiny and local models, weight fingerprints; no network."""

from __future__ import annotations

import pytest
import torch

from poptune.errors import ConfigError, ModelNotFoundError
from poptune.models import configs, load_model, model_names, resolve_model, weights_fingerprint


def test_every_registered_name_resolves_without_loading_anything():
    names = model_names()
    assert "gemma-3" in names and "tiny-llama" in names and len(names) == len(set(names))
    for name in names:
        spec = resolve_model(name)
        assert spec.source in ("embedded", "hub", "tiny")
        assert (spec.hub_id is None) == (spec.source == "tiny") and spec.path is None
    assert resolve_model("gemma-3") == resolve_model("gemma-3-270m")
    assert resolve_model("gemma-3").source == "embedded" and resolve_model("qwen3").hub_id == "Qwen/Qwen3-8B"


def test_a_local_directory_resolves_to_its_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ckpt").mkdir()
    spec = resolve_model("ckpt")
    assert spec.source == "local" and spec.name == "ckpt" and spec.path == str(tmp_path / "ckpt")


def test_an_unknown_name_says_what_was_meant():
    with pytest.raises(ModelNotFoundError, match=r"unknown model 'tiny-lama' \(did you mean 'tiny-llama'\?\)"):
        resolve_model("tiny-lama")


def test_tiny_models_load_seeded_in_eval_mode_with_a_left_padding_tokenizer():
    state = torch.random.get_rng_state()
    model, tokenizer = load_model("tiny-llama")
    again, _ = load_model("tiny-llama")
    assert torch.equal(state, torch.random.get_rng_state())  # the caller's generator is left alone
    assert not model.training and next(model.parameters()).dtype == torch.float32
    assert tokenizer.padding_side == "left" and tokenizer.pad_token is not None
    assert model.generation_config.pad_token_id == tokenizer.pad_token_id
    for (name, a), (_, b) in zip(model.named_parameters(), again.named_parameters()):
        assert torch.equal(a, b), name
    half, _ = load_model("tiny-qwen3", dtype="bfloat16")
    assert next(half.parameters()).dtype == torch.bfloat16


@pytest.mark.parametrize("amx", [False, True])
def test_the_default_dtype_is_the_devices_native_precision(monkeypatch, amx):
    # A CPU that multiplies bfloat16 in hardware (AMX) gets bfloat16, as CUDA does; another CPU float32.
    import poptune.device

    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    expected = torch.bfloat16 if amx else torch.float32
    assert poptune.device.native_bf16() is amx
    assert poptune.device.dtype_name(None, "cpu") == str(expected).removeprefix("torch.")
    assert poptune.device.dtype_name(None, "cuda:1") == "bfloat16"
    assert poptune.device.dtype_name("float16", "cpu") == "float16"
    model, _ = load_model("tiny-llama")
    assert next(model.parameters()).dtype == expected
    monkeypatch.delattr(torch.cpu, "_is_amx_tile_supported")  # a torch without the probe: float32, never a guess
    assert poptune.device.native_bf16() is False


def test_bad_weights_are_a_config_error():
    with pytest.raises(ConfigError, match="`weights` must be one of pretrained, random"):
        load_model("tiny-llama", weights="zeros")


def test_a_saved_model_loads_back_from_its_directory(tmp_path):
    model, tokenizer = load_model("tiny-llama")
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded, loaded_tokenizer = load_model(str(tmp_path))
    ids = torch.tensor([[1, 72, 105, 33]])
    with torch.inference_mode():
        torch.testing.assert_close(loaded(input_ids=ids).logits, model(input_ids=ids).logits)
    assert loaded_tokenizer.padding_side == "left"
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFoundError, match="not a Hugging Face model directory"):
        load_model(str(tmp_path / "empty"))


def test_fingerprints_name_the_weights(tmp_path):
    tiny = weights_fingerprint("tiny-llama")
    assert tiny.startswith("random-seed0-config-") and tiny == weights_fingerprint("tiny-llama", "random")
    assert tiny != weights_fingerprint("tiny-qwen3")
    assert weights_fingerprint("llama-3.1", "random").startswith("random-seed0-config-")  # no download
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 8)
    local = weights_fingerprint(str(tmp_path))
    assert local.startswith("files-sha256-") and local == weights_fingerprint(str(tmp_path))
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 16)  # replaced weights: another fingerprint
    assert weights_fingerprint(str(tmp_path)) != local


@pytest.mark.parametrize("name", configs.tiny_names())
def test_every_tiny_model_loads(name):
    model, _ = load_model(name)
    assert sum(p.numel() for p in model.parameters()) < 2_000_000
