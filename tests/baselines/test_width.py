"""Width pruning through torch-pruning: narrower MLPs at a matched parameter ratio, swapped in and out."""

import pytest
import torch

from poptune import ConfigError
from poptune.baselines.width import channel_share, width_pruned
from poptune.engine import decoder_of


def _params(model):
    return sum(p.numel() for layer in decoder_of(model).layers for p in layer.parameters())


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3"])
def test_width_pruning_removes_the_asked_share_of_the_layers_parameters_and_gives_the_model_back(shared, name):
    model, tokenizer = shared(name)
    ids = tokenizer("a short prompt to score", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        before = model(ids).logits
    total = _params(model)
    swap = width_pruned(model, 0.25)
    details = swap.describe()
    assert details["parameters_removed"] / total == pytest.approx(0.25, abs=0.02)  # channels are whole
    with swap.applied(model), torch.no_grad():
        assert _params(model) == total - details["parameters_removed"]
        layer = decoder_of(model).layers[0]
        kept = details["channels_kept"][0]
        # the coupled group: gate and up lose output rows, down loses the same input columns
        assert layer.mlp.gate_proj.out_features == layer.mlp.up_proj.out_features == kept
        assert layer.mlp.down_proj.in_features == kept
        pruned = model(ids).logits
    assert pruned.shape == before.shape and not torch.allclose(pruned, before)
    with torch.no_grad():
        assert torch.equal(model(ids).logits, before)  # the originals are back
    assert _params(model) == total


def test_the_lowest_norm_channels_go_first(shared):
    model, _ = shared("tiny-llama")
    swap = width_pruned(model, 0.2)
    original = decoder_of(model).layers[1].mlp
    pruned = swap.mlps[1]
    norms = (original.gate_proj.weight.norm(dim=1) ** 2 + original.up_proj.weight.norm(dim=1) ** 2
             + original.down_proj.weight.norm(dim=0) ** 2)
    kept = {tuple(row.tolist()) for row in pruned.gate_proj.weight}
    kept_idx = [i for i, row in enumerate(original.gate_proj.weight) if tuple(row.tolist()) in kept]
    dropped = [i for i in range(len(norms)) if i not in kept_idx]
    assert min(norms[kept_idx]) >= max(norms[dropped]) * 0.999


def test_a_ratio_the_mlps_cannot_reach_is_refused(shared):
    model, _ = shared("tiny-llama")
    with pytest.raises(ConfigError, match="use a smaller ratio"):
        channel_share(model, 0.95)
