"""Provenance: versions from the installed package's metadata, without importing the package root."""

from __future__ import annotations

import importlib.metadata
import platform

import torch

from poptune.measure import provenance


def test_versions_read_poptune_from_package_metadata(monkeypatch):
    found = provenance.versions()
    assert found["poptune"] == importlib.metadata.version("poptune")
    assert found["torch"] == torch.__version__ and found["python"] == platform.python_version()
    assert found["transformers"]

    def absent(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", absent)
    assert provenance.poptune_version() == "unknown"


def test_provenance_records_the_version_and_the_run():
    model = torch.nn.Linear(2, 2)
    record = provenance.provenance(model, model_name="tiny")
    assert record["poptune"] == provenance.poptune_version() and record["model"] == "tiny"
    assert record["dtype"] == "float32" and record["weights_fingerprint"] is None and record["load_end"] is None
