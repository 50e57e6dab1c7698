"""Stage-aware scoring: continuations at full depth from the context's cache, whatever state the model holds."""

from __future__ import annotations

import pytest
import torch

from poptune import ImageSize, PopConfig, apply_pop, image_prompt, synthetic_image
from poptune.evaluate.scoring import score_continuations

CONTEXTS = [[1, 50, 60, 70, 80], [1, 90, 91]]
CONTINUATIONS = [[100, 101, 102], [103, 104]]


@torch.no_grad()
def _one_pass(model, context, continuation):
    """Log-likelihood of ``continuation`` from one forward over context + continuation (no cache at all)."""
    ids = torch.tensor([context + continuation])
    logp = torch.log_softmax(model(input_ids=ids).logits[0, len(context) - 1 : -1].float(), dim=-1)
    return float(logp.gather(1, torch.tensor(continuation).unsqueeze(1)).sum())


def test_qwen3_vl_scores_text_after_an_image_prompt(shared):
    """An image prompt leaves Qwen3-VL's mRoPE offset (rope_deltas) set; text scoring must not pick it up."""
    model, tok = shared("tiny-qwen3-vl")
    inputs = image_prompt(model, tok, [synthetic_image(ImageSize(40, 30), seed=3)], ["What is this?"])
    with torch.no_grad():
        model(**inputs)
    assert model.model.rope_deltas is not None and bool(model.model.rope_deltas.ne(0).any())
    scores = score_continuations(model, CONTEXTS, CONTINUATIONS, pad_id=0)
    for (score, _), context, continuation in zip(scores, CONTEXTS, CONTINUATIONS):
        assert score == pytest.approx(_one_pass(model, context, continuation), abs=1e-4)


def test_continuations_are_decode_under_pop(shared):
    """A multi-token continuation over the context's cache is scored at full depth: skip=1 equals the full model."""
    model, _ = shared("tiny-gemma3")
    with apply_pop(model, PopConfig(skip=1)):
        scores = score_continuations(model, CONTEXTS, CONTINUATIONS, pad_id=0, prefill_chunk=2)
    for (score, _), context, continuation in zip(scores, CONTEXTS, CONTINUATIONS):
        assert score == pytest.approx(_one_pass(model, context, continuation), abs=1e-4)
