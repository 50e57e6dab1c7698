"""Virtual-gate importance on tiny random models: exact identity at g = 1, true gradients, zero for no-op layers."""

from __future__ import annotations

import json

import pytest
import torch

from poptune import ConfigError, DataError, PopConfig, apply_pop, load_model
from poptune.baselines.importance import (
    ImportanceResult,
    ImportanceSpec,
    compute_importance,
    decode_loss,
    gate_gradients,
    load_importance,
    propose_block,
    sample_with_gradients,
    virtual_gates,
)
from poptune.cli import main
from poptune.engine import decoder_of
from poptune.kvfit.calibration import sample_continuations

ARCHS = ("tiny-llama", "tiny-qwen3", "tiny-gemma3", "tiny-qwen3-vl")
SMALL = ImportanceSpec(samples=4, prompt_tokens=24, new_tokens=6, batch_size=2, seed=0)

_models: dict[str, tuple] = {}


def _shared(name: str) -> tuple:
    """A tiny model loaded once per session; tests must not change it."""
    if name not in _models:
        _models[name] = load_model(name)
    return _models[name]


def _sequences(batch: int = 2, length: int = 20, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(4, 260, (batch, length), generator=generator)  # byte tokens of the tiny tokenizer


@pytest.fixture(autouse=True)
def _no_data_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POPTUNE_DATA", raising=False)


@pytest.mark.parametrize("name", ARCHS)
def test_gates_at_one_leave_logits_unchanged(name: str) -> None:
    model, _ = _shared(name)
    ids = _sequences()
    layers = len(decoder_of(model).layers)
    with torch.no_grad():
        plain = model(input_ids=ids).logits
        for requires_grad in (False, True):
            gates = torch.ones(2, layers, 2, requires_grad=requires_grad)
            with virtual_gates(model, gates, prefill_positions=12):
                gated = model(input_ids=ids).logits
            assert torch.equal(plain, gated)
        assert torch.equal(plain, model(input_ids=ids).logits)  # hooks removed


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3"])
def test_gates_at_zero_remove_the_layer_at_their_positions(name: str) -> None:
    model, _ = _shared(name)
    ids = _sequences(batch=1, length=16)
    layers = len(decoder_of(model).layers)
    gates = torch.ones(1, layers, 2)
    gates[0, 2, 1] = 0.0  # layer 2 off at decode positions only: prefill positions are untouched
    with torch.no_grad():
        plain = model(input_ids=ids).logits
        with virtual_gates(model, gates, prefill_positions=10):
            gated = model(input_ids=ids).logits
    torch.testing.assert_close(plain[:, :10], gated[:, :10], rtol=0, atol=1e-6)  # causal: earlier rows untouched
    assert not torch.allclose(plain[:, 10:], gated[:, 10:])


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3"])
def test_gate_gradients_equal_finite_differences(name: str) -> None:
    model, _ = load_model(name, dtype=torch.float64)
    layers = len(decoder_of(model).layers)
    prompt = 14
    sequences = _sequences(batch=2, length=prompt + 5, seed=1)
    gradients, losses = gate_gradients(model, sequences, prompt)
    assert gradients.shape == (2, layers, 2) and losses.shape == (2,)
    assert all(p.requires_grad for p in model.parameters())  # flags restored

    def loss_at(sample: int, layer: int, stage: int, value: float) -> float:
        gates = torch.ones(1, layers, 2, dtype=torch.float64)
        gates[0, layer, stage] = value
        with torch.no_grad(), virtual_gates(model, gates, prompt - 1):
            return float(decode_loss(model, sequences[sample : sample + 1], prompt)[0])

    # The models' RMSNorms compute in float32 even in a float64 model, so the loss carries ~1e-7 relative noise:
    # a step of 1e-3 keeps both that noise and the truncation error (O(eps^2)) near 1e-5.
    eps = 1e-3
    for sample in range(2):
        for layer in range(layers):
            for stage in (0, 1):
                numeric = (loss_at(sample, layer, stage, 1 + eps) - loss_at(sample, layer, stage, 1 - eps)) / (2 * eps)
                assert gradients[sample, layer, stage].item() == pytest.approx(numeric, rel=1e-3, abs=5e-5)
    assert gradients.abs().max() > 1e-3  # the check above is not vacuous


def _silence_layer(model: torch.nn.Module, index: int) -> None:
    """Make layer ``index`` an exact identity: both residual branches are exactly zero."""
    layer = decoder_of(model).layers[index]
    with torch.no_grad():
        if hasattr(layer, "post_feedforward_layernorm"):  # Gemma-3: output * (1 + w) is 0 for w = -1
            layer.post_attention_layernorm.weight.fill_(-1.0)
            layer.post_feedforward_layernorm.weight.fill_(-1.0)
        else:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3"])
def test_identity_layer_has_zero_importance(name: str) -> None:
    model, tokenizer = load_model(name)  # a private copy: its weights are changed
    _silence_layer(model, 2)
    result = compute_importance(model, tokenizer, SMALL, model_name=name)
    assert result.prefill[2] == 0.0 and result.decode[2] == 0.0
    others = [i for i in range(result.num_layers) if i not in (2, result.num_layers - 1)]
    assert all(result.prefill[i] > 0 for i in others)
    assert all(result.decode[i] > 0 for i in range(result.num_layers) if i != 2)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3"])
def test_last_layer_prefill_importance_is_exactly_zero(name: str) -> None:
    # Nothing reads the last layer's output at prefill positions: skipping it in prefill is exact (DESIGN.md).
    model, _ = _shared(name)
    gradients, _ = gate_gradients(model, _sequences(length=18), 12)
    assert torch.all(gradients[:, -1, 0] == 0)
    assert torch.all(gradients[:, :-1, 0].abs().sum(dim=0) > 0)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3"])
def test_fused_sampling_pass_equals_sampling_then_gradients(name: str) -> None:
    # tiny-gemma3's sliding window is shorter than this prompt: the cache snapshot must survive its truncation.
    model, _ = _shared(name)
    prompts = _sequences(batch=2, length=40, seed=3)
    fused_sequences, fused, fused_losses = sample_with_gradients(
        model, prompts, 5, generator=torch.Generator().manual_seed(7)
    )
    sequences = sample_continuations(model, prompts, 5, generator=torch.Generator().manual_seed(7))
    assert torch.equal(fused_sequences, sequences)
    gradients, losses = gate_gradients(model, sequences, 40)
    torch.testing.assert_close(fused, gradients, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(fused_losses, losses, rtol=1e-5, atol=1e-6)


def test_batching_gives_per_sample_gradients() -> None:
    model, _ = _shared("tiny-llama")
    sequences = _sequences(batch=3, length=18, seed=2)
    together, _ = gate_gradients(model, sequences, 12)
    for i in range(3):
        alone, _ = gate_gradients(model, sequences[i : i + 1], 12)
        torch.testing.assert_close(together[i], alone[0], rtol=1e-4, atol=1e-7)


def test_compute_importance_is_reproducible_and_records_calibration(tmp_path) -> None:
    model, tokenizer = _shared("tiny-gemma3")
    first = compute_importance(model, tokenizer, SMALL, model_name="tiny-gemma3")
    again = compute_importance(model, tokenizer, SMALL, model_name="tiny-gemma3")
    assert first.prefill == again.prefill and first.decode == again.decode
    assert first.source.startswith("generated") and first.spec == SMALL
    assert max(first.prefill_normalised) == 1.0 and max(first.decode_normalised) == 1.0


def test_prompts_from_a_data_directory(tmp_path) -> None:
    (tmp_path / "wikitext-2").mkdir()
    (tmp_path / "wikitext-2" / "test.txt").write_text(" = Heading = \n The quick brown fox jumps over it . \n" * 40)
    model, tokenizer = _shared("tiny-llama")
    result = compute_importance(model, tokenizer, SMALL, model_name="tiny-llama", data_dir=tmp_path)
    assert result.source.endswith("test.txt")
    with pytest.raises(DataError):
        compute_importance(model, tokenizer, SMALL, model_name="tiny-llama", data_dir=tmp_path / "absent")


def test_refuses_a_model_with_pop_applied() -> None:
    model, tokenizer = _shared("tiny-llama")
    with apply_pop(model, PopConfig(skip=2)), pytest.raises(ConfigError, match="remove POP"):
        compute_importance(model, tokenizer, SMALL, model_name="tiny-llama")


@pytest.mark.parametrize("bad", [dict(samples=0), dict(prompt_tokens=1), dict(new_tokens=0), dict(seed=-1),
                                 dict(batch_size=1.5)])
def test_spec_validates(bad: dict) -> None:
    with pytest.raises(ConfigError):
        ImportanceSpec(**bad)


def _result() -> ImportanceResult:
    return ImportanceResult(model="m", prefill=(2.0, 1.0, 0.0), decode=(0.5, 1.0, 4.0), spec=SMALL,
                            source="generated", loss=3.25, seconds=1.5, dtype="float32", device="cpu",
                            hardware_id="cpu-x", versions={"torch": "2"}, date="2026-01-01", command="poptune x")


def test_json_round_trip(tmp_path) -> None:
    result = _result()
    path = tmp_path / "r.json"
    path.write_text(result.to_json())
    assert load_importance(path) == result
    data = json.loads(path.read_text())
    assert data["prefill"]["normalised"] == [1.0, 0.5, 0.0] and data["decode"]["normalised"] == [0.125, 0.25, 1.0]
    assert data["calibration"]["samples"] == 4 and data["calibration"]["seed"] == 0


@pytest.mark.parametrize("text", ["not json", "[]", '{"format": "other"}', '{"format": "poptune-importance/1"}'])
def test_load_rejects_bad_files(tmp_path, text: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(DataError):
        load_importance(path)
    with pytest.raises(DataError):
        load_importance(tmp_path / "missing.json")


def test_propose_block_picks_the_cheapest_deep_block() -> None:
    importance = [5, 4, 3, 2, 1, 0.1, 0.2, 9]
    assert propose_block(importance, 0.25) == PopConfig(skip=2, boundary="last", offset=1)
    assert propose_block(importance, 0.25, max_offset=0) == PopConfig(skip=2, offset=0)
    assert propose_block([3, 2, 1, 0, 0, 0], 1 / 3) == PopConfig(skip=2, offset=0)  # ties: the paper's offset 0
    assert propose_block([1.0] * 18, 1 / 3).skip == 6


@pytest.mark.parametrize("ratio", [0.0, 1.0, -0.1, 0.01, 0.99])
def test_propose_block_rejects_bad_ratios(ratio: float) -> None:
    with pytest.raises(ConfigError):
        propose_block([1.0] * 8, ratio)


def test_cli_writes_json_and_png(tmp_path, capsys) -> None:
    argv = ["importance", "--model", "tiny-llama", "--samples", "2", "--length", "16", "--new-tokens", "3",
            "--batch-size", "2", "--out", str(tmp_path)]
    assert main(argv) == 0
    (path,) = tmp_path.glob("importance-tiny-llama-*.json")
    result = load_importance(path)
    assert path.name == f"importance-tiny-llama-{result.hardware_id}.json"  # <kind>-<model>-<hardware>
    assert path.with_suffix(".png").stat().st_size > 0
    assert result.num_layers == 6 and result.command.startswith("poptune importance --model tiny-llama")
    out = capsys.readouterr().out
    assert "| layer |" in out and "proposed at ratio 0.33: skip=2" in out


@pytest.mark.parametrize("extra", [["--samples", "0"], ["--length", "1"], ["--ratio", "1.5"],
                                   ["--out", "/nonexistent/folder"], ["--data-dir", "/nonexistent"],
                                   ["--model", "tiny-lama"]])
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, capsys, extra: list[str]) -> None:
    argv = ["importance", "--model", "tiny-llama", "--out", str(tmp_path), *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("poptune importance: error:") and "\n" not in err
    assert not list(tmp_path.iterdir())
