"""Shared fixtures: offline hubs, tiny random models loaded once per session."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import pytest  # noqa: E402

TINY_MODELS = ("tiny-llama", "tiny-qwen3", "tiny-gemma3", "tiny-qwen3-vl")

_loaded: dict[str, tuple] = {}


@pytest.fixture(params=TINY_MODELS)
def tiny(request):
    """(model, tokenizer) for each tiny architecture; loaded once, POP removed after each test."""
    from poptune import load_model, remove_pop

    name = request.param
    if name not in _loaded:
        _loaded[name] = load_model(name)
    model, tokenizer = _loaded[name]
    yield model, tokenizer
    remove_pop(model)


@pytest.fixture(scope="session")
def gemma():
    """The real embedded Gemma-3-270M (integration tests only)."""
    from poptune import load_model

    return load_model("gemma-3")
