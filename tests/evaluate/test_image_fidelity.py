"""Fidelity on image prompts (a functional check on tiny random VLMs)."""

import pytest

from poptune import ImageSize, PopConfig, load_model
from poptune.evaluate.image_fidelity import measure_image_fidelity


@pytest.fixture(scope="module", params=["tiny-qwen3-vl", "tiny-gemma3-vl"])
def vlm(request):
    return load_model(request.param)


def test_skip1_is_faithful_and_deep_skips_are_not(vlm):
    model, tok = vlm
    sizes = (ImageSize(40, 30), ImageSize(160, 128))
    exact = measure_image_fidelity(model, tok, PopConfig(skip=1), sizes, "What is this?", tokens=6)
    assert exact.pairs == 2 and len(exact.per_position["kl"]) == 6
    assert exact.top1_agreement == 1.0 and exact.kl < 1e-6
    assert exact.nll_pop == pytest.approx(exact.nll_full, abs=1e-4)
    deep = measure_image_fidelity(model, tok, PopConfig(skip=4, boundary="none"), sizes, "What is this?", tokens=6)
    assert deep.kl > 1e-4 and deep.nll_full == pytest.approx(exact.nll_full, abs=1e-5)
