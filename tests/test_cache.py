"""The cache directory: platformdirs or ``$POPTUNE_CACHE``, and a temporary fallback where it cannot be written."""

from __future__ import annotations

import copy
import logging
import tempfile

import pytest

from poptune import PopConfig, cache
from poptune.engine import decoder_of
from poptune.kv import calibrated
from poptune.kvfit.fit import KVFitSpec
from poptune.kvfit.prepare import detach_kv_maps, prepare_kv


@pytest.fixture
def temp(tmp_path, monkeypatch):
    """The system's temporary directory, here a folder of the test (the fallback lives under it)."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    monkeypatch.setattr(cache, "_warned", set())
    return folder


def test_the_cache_is_poptune_cache_else_the_platforms(monkeypatch, tmp_path):
    monkeypatch.setenv("POPTUNE_CACHE", str(tmp_path / "c"))
    assert cache.cache_dir() == tmp_path / "c"
    monkeypatch.delenv("POPTUNE_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert cache.cache_dir() == tmp_path / "home" / ".cache" / "poptune"  # Linux: the same place as before
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == tmp_path / "xdg" / "poptune"


def test_an_unwritable_cache_falls_back_with_one_warning(monkeypatch, read_only_dir, temp, caplog):
    monkeypatch.setenv("POPTUNE_CACHE", str(read_only_dir / "cache"))
    with caplog.at_level(logging.WARNING, logger="poptune.cache"):
        first, second = cache.writable_cache_dir(), cache.writable_cache_dir()
    assert first == second == cache.fallback_dir() and first.is_dir() and first.parent == temp
    assert len(caplog.records) == 1 and str(read_only_dir) in caplog.records[0].getMessage()
    assert cache.cache_dirs() == (read_only_dir / "cache", first)


@pytest.mark.parametrize("kept", ["fallback", "nowhere"])
def test_calibrated_maps_with_an_unwritable_cache(shared, eval_data, monkeypatch, read_only_dir, temp, caplog, kept):
    """Issue 33, case 3: `--kv calibrated` with an unwritable HOME fitted the maps, then failed saving them
    (FileNotFoundError). Now they are kept in the fallback folder, or used without being kept; one warning."""
    model, tok = shared("tiny-llama")
    model = copy.deepcopy(model)
    monkeypatch.delenv("POPTUNE_KV_MAPS")
    monkeypatch.setenv("POPTUNE_CACHE", str(read_only_dir / "cache"))
    if kept == "nowhere":
        monkeypatch.setattr("poptune.kv.maps.fallback_dir", lambda: read_only_dir / "tmp")
    spec = KVFitSpec(samples=2, length=32, data_dir=str(eval_data))
    config = PopConfig(3, kv="calibrated")
    with caplog.at_level(logging.WARNING, logger="poptune.cache"):
        maps = prepare_kv(model, tok, config, fingerprint="test-weights", spec=spec)
        again = prepare_kv(model, tok, config, fingerprint="test-weights", spec=spec)
    assert again is calibrated.SOURCE.held(decoder_of(model))[(3, 6)]  # attached, and not fitted twice
    assert len(caplog.records) == 1
    if kept == "fallback":
        assert maps.path is not None and maps.path.is_relative_to(temp) and maps.path.is_file()
        detach_kv_maps(model)
        loaded = prepare_kv(model, tok, config, fingerprint="test-weights", spec=spec)
        assert loaded.path == maps.path and loaded.meta == maps.meta  # read back from the fallback
    else:
        assert maps.path is None and "nothing is kept" in caplog.records[0].getMessage()
