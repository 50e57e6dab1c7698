"""Fidelity of a POP configuration to the full model on image prompts (vision-language models).

The same stage-aware semantics as :mod:`poptune.evaluate.fidelity`: the prompt -- one image and a question --
is the context (POP prefill, its boundary rule included); the continuation, the full model's own greedy answer,
is scored at full depth from that cache, as decode would produce it. With the tiny and random-weight models
this is a functional check of the engine on image prompts, not a statement about real VLM accuracy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from poptune.engine import PopConfig, apply_pop, remove_pop, stage
from poptune.evaluate.fidelity import FidelityResult, summarise
from poptune.models.vision import ImageSize, decode_position_ids, image_prompt, kept_rope_state, synthetic_image

__all__ = ["measure_image_fidelity"]


@torch.inference_mode()
def _continuation_logprobs(model: Any, prompt: dict[str, torch.Tensor], continuation: torch.Tensor) -> torch.Tensor:
    """(m, V) log-probabilities of ``continuation`` (1, m) after ``prompt``: a prefill, then one full-depth pass."""
    out = model(**prompt, use_cache=True, logits_to_keep=1)
    first = torch.log_softmax(out.logits[:, -1].float(), dim=-1)  # (1, V)
    tail = continuation[:, :-1]  # (1, m - 1): each predicts the next
    mask = torch.cat([prompt["attention_mask"], torch.ones_like(tail)], dim=1)
    positions = decode_position_ids(model, prompt, mask, new=tail.shape[1])
    with stage(model, "decode"):
        rest = model(input_ids=tail, attention_mask=mask, position_ids=positions, cache=out.cache,
                     use_cache=True).logits
    return torch.cat([first, torch.log_softmax(rest[0].float(), dim=-1)], dim=0)


def measure_image_fidelity(
    model: Any,
    tokenizer: Any,
    config: PopConfig,
    sizes: Sequence[ImageSize],
    question: str,
    *,
    tokens: int = 16,
    seed: int = 0,
) -> FidelityResult:
    """Compare POP with ``config`` to the full model on one image prompt per size (seeded synthetic images).

    Returns the continuation NLL of both, top-1 agreement and KL(full || POP), overall and per decode
    position, over the full model's greedy ``tokens``-token answers. The model is left without POP.
    """
    continuations, full, pop = [], [], []
    with kept_rope_state(model):
        for i, size in enumerate(sizes):
            prompt = image_prompt(model, tokenizer, [synthetic_image(size, seed=seed + i)], [question],
                                  device=next(model.parameters()).device)
            remove_pop(model)
            with torch.inference_mode():
                answer = model.generate(**prompt, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False)
            answer = answer[:, prompt["input_ids"].shape[1] :]  # (1, tokens)
            full.append(_continuation_logprobs(model, prompt, answer))
            apply_pop(model, config)
            try:
                pop.append(_continuation_logprobs(model, prompt, answer))
            finally:
                remove_pop(model)
            continuations.append(answer[0].tolist())
    return summarise(config, continuations, full, pop, source=f"image prompts {', '.join(map(str, sizes))}")
