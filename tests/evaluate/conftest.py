"""Fixtures shared by the evaluate tests."""

import pytest


@pytest.fixture
def no_model_load(monkeypatch):
    """Loading any model fails the test: refusals of bad input must come before a model loads."""
    import poptune.models.registry as registry

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the input was checked")

    monkeypatch.setattr(registry, "_random_model", refuse)
    monkeypatch.setattr(registry, "_from_pretrained", refuse)
