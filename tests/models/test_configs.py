"""The named configurations: tiny test shapes and published full-size shapes (configs only, no weights)."""

from __future__ import annotations

import pytest
from transformers import AutoConfig

from poptune.models import configs, model_names
from poptune.models.configs import TINY_VOCAB_SIZE, full_config, tiny_config


def _text(config: dict) -> dict:
    """The text stack's part of a config (vision-language configs nest it)."""
    return config.get("text_config", config)


def _built(config: dict):
    config = dict(config)
    return AutoConfig.for_model(config.pop("model_type"), **config)


@pytest.mark.parametrize("name", configs.tiny_names())
def test_tiny_configs_are_small_byte_level_and_deep_enough(name):
    config = tiny_config(name)
    text = _text(config)
    assert text["vocab_size"] == TINY_VOCAB_SIZE and text["num_hidden_layers"] >= 6 and text["hidden_size"] <= 64
    assert name in model_names()
    built = _built(config)
    assert built.architectures == config["architectures"] or "architectures" not in config


@pytest.mark.parametrize("name", configs.full_names())
def test_full_configs_build_and_are_registered(name):
    config = full_config(name)
    assert name in model_names() and config["architectures"]
    text = _text(config)
    built = _built(config)
    layers = getattr(built, "text_config", built).num_hidden_layers
    assert layers == text["num_hidden_layers"] >= 18


def test_gemma3_layer_types_follow_the_sliding_pattern():
    types = _text(full_config("gemma-3-1b"))["layer_types"]
    assert len(types) == 26 and types[5] == types[11] == "full_attention"
    assert types.count("full_attention") == 4 and types[0] == "sliding_attention"
    tiny = tiny_config("tiny-gemma3")
    assert tiny["layer_types"] == ["sliding_attention", "sliding_attention", "full_attention"] * 2
    assert tiny["sliding_window"] == 8


def test_vision_configs_use_the_tiny_tokenizers_vision_ids():
    qwen, gemma = tiny_config("tiny-qwen3-vl"), tiny_config("tiny-gemma3-vl")
    ids = {qwen["image_token_id"], qwen["video_token_id"], qwen["vision_start_token_id"], qwen["vision_end_token_id"]}
    assert ids == {260, 261, 262, 263}
    assert {gemma["image_token_index"], gemma["boi_token_index"], gemma["eoi_token_index"]} <= ids


def test_configs_are_copies_and_unknown_names_have_none():
    first = tiny_config("tiny-llama")
    first["num_hidden_layers"] = 99
    assert tiny_config("tiny-llama")["num_hidden_layers"] == 6
    nested = full_config("gemma-3-4b")
    nested["text_config"]["num_hidden_layers"] = 1
    assert full_config("gemma-3-4b")["text_config"]["num_hidden_layers"] != 1
    assert tiny_config("gemma-3-1b") is None and full_config("tiny-llama") is None and full_config("nope") is None


# Published parameter counts of the full-size models (model cards: Llama-3.1-8B 8.03B, Qwen3-8B 8.19B, Qwen3-VL-8B
# 8.77B; Gemma-3-12B 12.19B as its architecture builds, the vision tower and projector included).
PUBLISHED_PARAMETERS = {"llama-3.1": 8.03e9, "gemma-3-12b": 12.19e9, "qwen3-vl": 8.77e9, "qwen3": 8.19e9}


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMETERS))
def test_full_size_models_built_on_meta_have_their_published_parameter_counts(name):
    import torch

    from poptune.models.registry import _random_model

    model = _random_model(full_config(name), torch.device("meta"), torch.bfloat16)  # shapes only, no memory
    count = sum(p.numel() for p in model.parameters())  # tied embeddings counted once
    assert count == pytest.approx(PUBLISHED_PARAMETERS[name], rel=0.002), f"{name}: {count / 1e9:.3f}B"
