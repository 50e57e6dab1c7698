"""Image prompts: sizes, the locally built image processors, model inputs, decode positions."""

import pytest
import torch

from poptune import ConfigError, ImageSize, image_prompt, load_model, synthetic_image
from poptune.models.vision import (
    check_takes_images,
    decode_position_ids,
    image_processor,
    image_token_counts,
    parse_image_sizes,
    require_vision,
)


def test_sizes_parse_and_refuse_malformed_text():
    assert parse_image_sizes("640x480, 1280X720") == (ImageSize(640, 480), ImageSize(1280, 720))
    assert str(ImageSize.parse("2560x1440")) == "2560x1440"
    for bad in ("640", "640x", "x480", "640*480", "0x480", "-640x480", "640x480x3", "1.5x2"):
        with pytest.raises(ConfigError, match="WIDTHxHEIGHT"):
            parse_image_sizes(bad)
    with pytest.raises(ConfigError, match="at least one"):
        parse_image_sizes(" , ")
    with pytest.raises(ConfigError, match=r"`width` must be an integer in \[1, 16384\]"):
        ImageSize(20000, 10)
    with pytest.raises(ConfigError, match="aspect ratio"):
        ImageSize(4000, 10)


def _full_config(name):
    from transformers import AutoConfig

    from poptune.models import configs

    data = configs.full_config(name)
    return AutoConfig.for_model(data.pop("model_type"), **data)


@pytest.mark.parametrize(
    "name, expected",
    # Qwen3-VL-8B: 32-pixel merged patches, so 640x480 -> 20x15; 720/32 = 22.5 rounds to 22; Gemma-3: 256 always.
    [("qwen3-vl", {"640x480": 300, "1280x720": 880, "2560x1440": 3600}),
     ("gemma-3-4b", {"640x480": 256, "1280x720": 256, "2560x1440": 256})],
)
def test_full_size_processors_give_the_published_token_counts(name, expected):
    config = _full_config(name)
    processor = image_processor(config)
    for text, tokens in expected.items():
        out = processor(images=[synthetic_image(ImageSize.parse(text))], return_tensors="pt")
        if name == "qwen3-vl":
            t, h, w = out["image_grid_thw"][0].tolist()
            assert t * h * w // config.vision_config.spatial_merge_size**2 == tokens, text
        else:
            assert out["pixel_values"].shape == (1, 3, 896, 896) and config.mm_tokens_per_image == tokens


@pytest.fixture(scope="module", params=["tiny-qwen3-vl", "tiny-gemma3-vl"])
def vlm(request):
    return load_model(request.param)


def test_prompt_inputs_are_left_padded_with_image_types(vlm):
    model, tok = vlm
    images = [synthetic_image(ImageSize(40, 30)), synthetic_image(ImageSize(160, 128), seed=1)]
    inputs = image_prompt(model, tok, images, ["A question?", "A longer question, this one?"])
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    counts = image_token_counts(model, inputs)
    lengths = mask.sum(-1).tolist()
    assert ids.shape[1] == max(lengths) and mask[0, 0] == 0 and mask[:, -1].all()  # left padding
    types = inputs.get("mm_token_type_ids", inputs.get("token_type_ids"))
    assert types.sum(-1).tolist() == counts and types[ids == model.config.image_token_id].all()
    if "image_grid_thw" in inputs:
        assert counts == [70, 80]
    else:
        assert counts == [16, 16] and inputs["pixel_values"].shape == (2, 3, 56, 56)
    assert tok.decode(ids[1, -28:]) == "A longer question, this one?"


def test_the_image_reaches_the_text_stack(vlm):
    """Different pictures give different logits (Gemma-3's zero-initialised projection is made random)."""
    model, tok = vlm
    with torch.no_grad():
        a, b = (model(**image_prompt(model, tok, [synthetic_image(ImageSize(40, 30), seed=s)], ["?"])).logits[:, -1]
                for s in (0, 1))
    assert not torch.allclose(a, b, atol=1e-4)


def test_manual_decode_positions_match_generate(vlm):
    """A decode loop with :func:`decode_position_ids` writes what ``generate`` writes, for a padded batch."""
    model, tok = vlm
    images = [synthetic_image(ImageSize(40, 30)), synthetic_image(ImageSize(160, 128), seed=1)]
    inputs = image_prompt(model, tok, images, ["A question?", "A longer question, this one?"])
    with torch.no_grad():
        expected = model.generate(**inputs, max_new_tokens=4, do_sample=False)[:, -4:]
        out = model(**inputs, use_cache=True)
        mask, tokens = inputs["attention_mask"], [out.logits[:, -1].argmax(-1, keepdim=True)]
        for _ in range(3):
            mask = torch.cat([mask, torch.ones_like(tokens[-1])], dim=1)
            out = model(input_ids=tokens[-1], attention_mask=mask,
                        position_ids=decode_position_ids(model, inputs, mask), cache=out.cache, use_cache=True)
            tokens.append(out.logits[:, -1].argmax(-1, keepdim=True))
    assert torch.equal(torch.cat(tokens, dim=1), expected)


def test_text_only_models_are_refused_by_name():
    model, tok = load_model("tiny-llama")
    with pytest.raises(ConfigError, match="'tiny-llama' is a text-only model"):
        require_vision(model, "tiny-llama")
    with pytest.raises(ConfigError, match="text-only model"):
        image_prompt(model, tok, [synthetic_image(ImageSize(8, 8))], ["?"])
    with pytest.raises(ConfigError, match=r"'gemma-3' is a text-only model \(Gemma3ForCausalLM\)"):
        check_takes_images("gemma-3")  # known from poptune's configs: refused before any loading
    check_takes_images("gemma-3-4b")
    check_takes_images("tiny-qwen3-vl")
