"""The baselines' metrics against hand-computed values, and every method built on a tiny model."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from poptune import ConfigError, PopConfig, load_model
from poptune.baselines import (
    METHODS,
    LayerRemoval,
    angular_distances,
    block_influence,
    build_baseline,
    layer_count,
    merge_layers,
    sleb_order,
    wanda_prune,
)
from poptune.engine import decoder_of
from poptune.kvfit.calibration import CalibrationSpec, calibration, calibration_nll, residual_stream

from .test_surgery import make_identity


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-llama")


@pytest.fixture(scope="module")
def calib(tiny, eval_data):
    model, tok = tiny
    return calibration(model, tok, CalibrationSpec(samples=4, length=32, seed=0, data_dir=str(eval_data)))


def test_block_influence_by_hand():
    # Two layers on 2-d states, one token: x0=(1,0) -> x1=(0,1) (orthogonal: BI 1) -> x2=(0,1) (identity: BI 0).
    states = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]]).view(3, 1, 1, 2)
    assert block_influence(states) == pytest.approx([1.0, 0.0])


def test_angular_distance_by_hand():
    # Last-token states x0=(1,0), x1=(1,1), x2=(-1,0): d(0,1)=45deg=0.25, d(1,2)=135deg=0.75, d(0,2)=1.
    states = torch.tensor([[0.0, 5.0, 1.0, 0.0], [0.0, 5.0, 1.0, 1.0], [0.0, 5.0, -1.0, 0.0]]).view(3, 1, 2, 2)
    assert angular_distances(states, 1) == pytest.approx([0.25, 0.75])
    assert angular_distances(states, 2) == pytest.approx([1.0])
    with pytest.raises(ValueError):
        angular_distances(states, 3)


def test_wanda_prune_by_hand():
    weight = torch.tensor([[1.0, -2.0, 3.0, 0.5], [4.0, 1.0, -1.0, 2.0]])
    norm = torch.tensor([1.0, 1.0, 0.1, 10.0])
    # Scores: row 0 = [1, 2, 0.3, 5] -> zero columns 2 and 0; row 1 = [4, 1, 0.1, 20] -> zero columns 2 and 1.
    pruned = wanda_prune(weight, norm, 0.5)
    assert pruned.tolist() == [[0.0, -2.0, 0.0, 0.5], [4.0, 0.0, 0.0, 2.0]]
    assert weight[0, 0] == 1.0  # a copy


def test_merge_layers_reserves_differences(tiny):
    model, _ = tiny
    a, b, c = (decoder_of(model).layers[i] for i in (1, 2, 3))
    merged = merge_layers([a, b, c])
    name = "mlp.up_proj.weight"

    def get(m):
        return dict(m.named_parameters())[name]

    torch.testing.assert_close(get(merged), get(b) + get(c) - get(a))
    assert merged is not a and not torch.equal(get(a), get(merged))


def test_identity_layer_scores_zero_and_is_chosen(tiny, calib):
    model, tok = tiny
    model = copy.deepcopy(model)
    for i in (2, 3):
        make_identity(decoder_of(model).layers[i])
    states = residual_stream(model, calib)
    assert states.shape[:2] == (7, 4)
    bi = block_influence(states)
    assert bi[2] == pytest.approx(0.0, abs=1e-6) and bi[3] == pytest.approx(0.0, abs=1e-6)
    assert min(bi[i] for i in (0, 1, 4, 5)) > 1e-4
    assert angular_distances(states, 2)[2] == pytest.approx(0.0, abs=1e-3)
    full = calibration_nll(model, calib)
    by_hand = {}
    for layer in range(1, 5):  # SLEB never removes the first or the last layer
        with LayerRemoval((layer,)).applied(model):
            by_hand[layer] = calibration_nll(model, calib)
    assert by_hand[2] == pytest.approx(full, rel=1e-6)  # removing an identity layer changes nothing
    order, losses = sleb_order(model, calib, 1)
    assert order == [min(by_hand, key=by_hand.get)] and losses == [pytest.approx(min(by_hand.values()), rel=1e-6)]


@pytest.mark.parametrize("method", METHODS)
def test_every_method_builds_at_a_third(tiny, eval_data, method):
    model, tok = tiny
    spec = CalibrationSpec(samples=2, length=16, data_dir=str(eval_data))
    ratio = 0.3 if method == "wanda" else 0.33
    baseline = build_baseline(model, tok, method, ratio, spec)
    assert baseline.method == method
    if method == "wanda":
        weights = baseline.transform.weights
        assert len(weights) == 6 * 7  # q, k, v, o, gate, up, down in 6 layers
        for w in weights.values():
            assert ((w == 0).sum(dim=1) >= int(0.3 * w.shape[1])).all()
        return
    if method == "width":  # narrower MLPs, no layer removed (tests/baselines/test_width.py)
        assert baseline.details["removed"] == [] and baseline.details["parameters_removed"] > 0
        assert baseline.label == "width 33%"
        return
    assert len(baseline.details["removed"]) == 2  # round(0.33 * 6)
    if method == "shortgpt-gen":
        assert baseline.transform is None
        assert baseline.pop == PopConfig(skip=2, boundary="none", layers=tuple(baseline.details["removed"]))
    else:
        assert baseline.transform.removed == tuple(baseline.details["removed"])
    if method == "static-last":
        assert baseline.details["removed"] == [4, 5]
    if method == "angular":
        removed = baseline.details["removed"]
        assert removed[1] == removed[0] + 1
    if method == "sleb":
        assert 0 not in baseline.details["removed"] and 5 not in baseline.details["removed"]
    if method == "laco":
        assert baseline.details["merges"] and math.isfinite(baseline.details["threshold"])
        assert set(baseline.transform.replaced) == {m["into"] for m in baseline.details["merges"]}
    if method != "static-last":
        assert baseline.details["calibration"]["samples"] == 2


def test_ratio_validation():
    assert layer_count(0.33, 18) == 6
    with pytest.raises(ConfigError, match=r"`ratio` must be in \(0, 1\)"):
        layer_count(1.2, 18)
    with pytest.raises(ConfigError, match="sleb can remove 1 to 4"):
        layer_count(0.9, 6, "sleb")
    with pytest.raises(ConfigError, match="unknown baseline"):
        build_baseline(None, None, "magic", 0.3)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3", "tiny-qwen3"])
def test_the_searches_from_kept_layer_inputs_equal_the_whole_forwards(name, eval_data):
    """SLEB's and LaCo's candidates run from their own layer's input (layer_inputs): the same losses,
    similarities and choices, bit for bit, as every candidate's whole forward."""
    from poptune.baselines import laco_merges

    model, tok = load_model(name)
    calib = calibration(model, tok, CalibrationSpec(samples=3, length=24, seed=1, batch_size=2,
                                                    data_dir=str(eval_data)))
    assert sleb_order(model, calib, 2, reuse=True) == sleb_order(model, calib, 2, reuse=False)
    for threshold in (0.99, -0.5):  # passes that refuse merges and lower the threshold; merges kept at once
        reused, info = laco_merges(model, calib, 3, layers=2, threshold=threshold, reuse=True)
        whole, whole_info = laco_merges(model, calib, 3, layers=2, threshold=threshold, reuse=False)
        assert info == whole_info and reused.removed == whole.removed and info["merges"]
        assert sorted(reused.replaced) == sorted(whole.replaced)
