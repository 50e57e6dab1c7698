"""The plugin's refusals that need no vLLM: the configuration asked for, and what POP in vLLM covers."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from poptune.engine import PopConfig
from poptune.errors import ConfigError, UnsupportedModelError
from poptune.kv import registry
from poptune.models.registry import directory_fingerprint
from poptune.serving import vllm_plugin, vllm_pop


def _served(directory: Path, settings: dict[str, Any] | None) -> Any:
    return SimpleNamespace(additional_config={"poptune": settings} if settings else {},
                           model_config=SimpleNamespace(model=str(directory)))


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "model"
    directory.mkdir()
    (directory / "config.json").write_text('{"model_type": "llama"}')
    (directory / "model.safetensors").write_bytes(b"0" * 64)
    return directory


def _export(path: Path, fingerprint: str | None) -> Path:
    model = {"name": "local"} | ({"weights_fingerprint": fingerprint} if fingerprint else {})
    path.write_text(json.dumps({"format": "poptune-config/1", "model": model,
                                "pop_config": {"skip": 2, "boundary": "last", "offset": 0}}))
    return path


def test_nothing_asked_is_no_pop(model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(vllm_plugin.ENV, raising=False)
    assert vllm_plugin.requested_config(_served(model_dir, None)) is None


def test_an_export_for_these_weights_is_served(model_dir: Path, tmp_path: Path) -> None:
    path = _export(tmp_path / "pop.json", directory_fingerprint(model_dir))
    assert vllm_plugin.requested_config(_served(model_dir, {"export": str(path)})) == PopConfig(skip=2)


def test_the_environment_names_an_export_too(model_dir: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(vllm_plugin.ENV, str(_export(tmp_path / "pop.json", directory_fingerprint(model_dir))))
    assert vllm_plugin.requested_config(_served(model_dir, None)) == PopConfig(skip=2)


def test_an_export_for_other_weights_is_refused_unless_forced(model_dir: Path, tmp_path: Path) -> None:
    path = _export(tmp_path / "pop.json", "files-sha256-0123")
    with pytest.raises(ConfigError, match="tuned on other weights"):
        vllm_plugin.requested_config(_served(model_dir, {"export": str(path)}))
    assert vllm_plugin.requested_config(_served(model_dir, {"export": str(path), "force": True})) == PopConfig(skip=2)


def test_an_export_without_a_fingerprint_is_refused_unless_forced(model_dir: Path, tmp_path: Path) -> None:
    path = _export(tmp_path / "pop.json", None)
    with pytest.raises(ConfigError, match="names no weights fingerprint"):
        vllm_plugin.requested_config(_served(model_dir, {"export": str(path)}))


@pytest.mark.parametrize("settings", [{"export": "a", "pop_config": {"skip": 1}}, {"skip": 1}, {"force": True}])
def test_settings_of_the_wrong_shape_are_refused(model_dir: Path, settings: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="poptune's vLLM settings"):
        vllm_plugin.requested_config(_served(model_dir, settings))


def test_a_file_that_is_no_export_is_refused(model_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match="not a configuration exported by poptune"):
        vllm_plugin.requested_config(_served(model_dir, {"export": str(tmp_path / "x.json")}))


def _decoder(name: str, layers: int = 6) -> Any:
    decoder = type(name, (), {})()
    decoder.layers = [SimpleNamespace(self_attn=SimpleNamespace(attn=SimpleNamespace(
        impl=type("CPUAttentionBackendImpl", (), {})()))) for _ in range(layers)]
    return SimpleNamespace(model=decoder)


def test_an_architecture_the_plugin_does_not_cover_is_refused_by_name() -> None:
    with pytest.raises(UnsupportedModelError, match="not MistralModel"):
        vllm_pop.apply(_decoder("MistralModel"), PopConfig(skip=2))


def test_a_skip_beyond_the_model_and_another_kv_source_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"`skip` must be in \[0, 5\]"):
        vllm_pop.apply(_decoder("LlamaModel"), PopConfig(skip=6))
    with pytest.raises(ConfigError, match="own K/V only"):
        vllm_pop.apply(_decoder("LlamaModel"), PopConfig(skip=2, kv=registry.NAMES[-1]))


def test_another_attention_backend_is_refused_by_name() -> None:
    model = _decoder("LlamaModel")
    model.model.layers[5].self_attn.attn.impl = type("FlashAttentionImpl", (), {})()
    with pytest.raises(UnsupportedModelError, match="not FlashAttentionImpl"):
        vllm_pop.apply(model, PopConfig(skip=2))


def test_the_deep_tokens_are_the_boundary_and_decode_of_each_request() -> None:
    # Three requests in one step: a prompt's middle chunk (positions 10-13 of 20), the chunk holding the boundary
    # (16-19 of 20) and a decode token (position 30 of a 25-token prompt); the window is 3.
    positions = torch.tensor([10, 11, 12, 13, 16, 17, 18, 19, 30])
    starts = torch.tensor([0, 4, 8, 9])
    deep = vllm_pop.deep_tokens(positions, starts, torch.tensor([20, 20, 25]), 3)
    assert deep.tolist() == [False] * 4 + [False, True, True, True] + [True]
    plan = vllm_pop.StepPlan.of(positions, starts, torch.tensor([20, 20, 25]), 3)
    assert plan is not None
    assert plan.requests.tolist() == [1, 2] and plan.query_start_loc.tolist() == [0, 3, 4]
    assert plan.max_query_len == 3 and plan.pruned.tolist() == [0, 1, 2, 3, 4]
    assert vllm_pop.StepPlan.of(torch.tensor([30]), torch.tensor([0, 1]), torch.tensor([25]), 0) is None
