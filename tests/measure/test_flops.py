"""The FLOPs model behind the ideal speedup, against hand-computed values."""

from types import SimpleNamespace

import pytest

from poptune import PopConfig
from poptune.measure.flops import ideal_speedup, prefill_flops

CONFIG = SimpleNamespace(
    hidden_size=8, intermediate_size=16, num_attention_heads=2, num_key_value_heads=1, head_dim=4,
    vocab_size=10, num_hidden_layers=3, layer_types=None, sliding_window=None,
)


def test_full_prefill_by_hand():
    # per token per layer: q+o 2*2*8*2*4=256, k+v 2*2*8*1*4=128, ffn 3*2*8*16=768 -> 1152; attention 2*2*2*4=32
    # per key; 4 tokens see 1+2+3+4 = 10 keys; head 2*8*10 = 160.
    assert prefill_flops(CONFIG, 4) == 3 * (4 * 1152 + 32 * 10) + 160


def test_pop_prefill_by_hand():
    # skip=1, boundary=last: the last layer writes K/V for 3 tokens (3*128) and runs token 4 fully
    # (1152 + 32*4 keys).
    kept = 2 * (4 * 1152 + 32 * 10)
    skipped = 3 * 128 + 1152 + 32 * 4
    assert prefill_flops(CONFIG, 4, PopConfig(skip=1)) == kept + skipped + 160


def test_ideal_grows_with_skip_and_is_one_without_pruning():
    ratios = [ideal_speedup(CONFIG, 64, PopConfig(skip=s)) for s in range(3)]
    assert ratios[0] == 1.0 and ratios[0] < ratios[1] < ratios[2]
    assert ideal_speedup(CONFIG, 4, PopConfig(skip=2, boundary="window-4")) == 1.0  # all tokens at full depth


def test_sliding_window_caps_attention():
    windowed = SimpleNamespace(**{**vars(CONFIG), "layer_types": ["sliding_attention"] * 3, "sliding_window": 2})
    # keys seen by 4 tokens with a window of 2: 1+2+2+2 = 7
    assert prefill_flops(windowed, 4) == 3 * (4 * 1152 + 32 * 7) + 160


@pytest.mark.parametrize("boundary", ["none", "last", "window-16"])
def test_boundary_costs_order(boundary):
    assert ideal_speedup(CONFIG, 256, PopConfig(skip=2, boundary=boundary)) > 1.0


def test_vision_encoder_flops_grow_with_the_image_and_dilute_the_ideal():
    from transformers import AutoConfig

    from poptune import PopConfig
    from poptune.measure.flops import ideal_speedup, vision_flops
    from poptune.models import configs

    data = configs.full_config("qwen3-vl")
    config = AutoConfig.for_model(data.pop("model_type"), **data)
    small, large = vision_flops(config, 1200), vision_flops(config, 14400)  # 640x480, 2560x1440 (16-pixel patches)
    assert large > 12 * small > 0  # attention over the patches grows faster than linearly
    text, pop = config.text_config, PopConfig(skip=12)
    assert 1.0 < ideal_speedup(text, 318, pop, fixed=small) < ideal_speedup(text, 318, pop)


def test_sdpa_sliding_layers_count_every_key_from_the_window_on():
    from types import SimpleNamespace

    from poptune.measure.flops import prefill_flops

    cfg = SimpleNamespace(num_attention_heads=2, head_dim=4, hidden_size=8, num_hidden_layers=2, intermediate_size=16,
                          num_key_value_heads=1, vocab_size=10, layer_types=["sliding_attention", "full_attention"],
                          sliding_window=8)
    per_key = 2 * 2 * 2 * 4
    # Below the window transformers skips the mask: SDPA's causal path, as the plain count.
    assert prefill_flops(cfg, 7, attention="sdpa") == prefill_flops(cfg, 7)
    # From the window on, the sliding layer's materialised mask makes SDPA compute the whole square.
    counted = sum(min(i + 1, 8) for i in range(16))
    assert prefill_flops(cfg, 16, attention="sdpa") - prefill_flops(cfg, 16) == per_key * (16 * 16 - counted)
