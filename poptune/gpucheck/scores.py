"""Real weights: POP's likelihood scores on the GPU equal the CPU's, item by item, within 1e-3 (float32).

The items are (context, continuation) pairs cut at evenly spaced offsets of the first chapter of *Pride and
Prejudice* (:func:`poptune.measure.timing_prompts.demo_prompt`, public domain, in the package): no data directory
needed. Each item's score is lm-eval's log-likelihood of the continuation after a POP prefill of the context
(:func:`poptune.evaluate.scoring.score_continuations`).
"""

from __future__ import annotations

from typing import Any

import torch

from poptune.engine import PopConfig, apply_pop, remove_pop
from poptune.errors import ModelNotFoundError
from poptune.evaluate.fidelity import FidelitySpec, fidelity_pairs
from poptune.evaluate.scoring import score_continuations
from poptune.gpucheck.plan import Plan
from poptune.measure.timing_prompts import demo_prompt
from poptune.models import load_model

__all__ = ["SCORE_TOLERANCE", "compare_scores"]

#: Largest difference of one item's log-likelihood between the GPU and the CPU.
SCORE_TOLERANCE = 1e-3


def _scores(model: Any, tokenizer: Any, pairs: list[tuple[list[int], list[int]]], skip: int
            ) -> list[tuple[float, bool]]:
    apply_pop(model, PopConfig(skip=skip))
    try:
        contexts, continuations = zip(*pairs)
        return score_continuations(model, contexts, continuations, pad_id=tokenizer.pad_token_id)
    finally:
        remove_pop(model)


def compare_scores(plan: Plan, device: torch.device) -> dict[str, Any]:
    """Scores of ``plan.scores_model`` with POP on ``device`` and on the CPU, and their largest difference.

    Returns ``status`` PASS or FAIL, or SKIP with the reason when the real weights are not at hand.
    """
    try:
        model, tokenizer = load_model(plan.scores_model, device=device, dtype="float32")
    except ModelNotFoundError as e:
        return {"status": "SKIP", "reason": f"{plan.scores_model} weights not available here: {e}"}
    spec = FidelitySpec(context_tokens=plan.scores_context, continuation_tokens=plan.scores_continuation,
                        pairs=plan.scores_items)
    pairs = fidelity_pairs(tokenizer, demo_prompt(), spec)
    on_device = _scores(model, tokenizer, pairs, plan.scores_skip)
    reference = model if device.type == "cpu" else model.to("cpu")  # the same weights, moved
    on_cpu = _scores(reference, tokenizer, pairs, plan.scores_skip)
    diffs = [abs(a[0] - b[0]) for a, b in zip(on_device, on_cpu)]
    greedy = sum(a[1] != b[1] for a, b in zip(on_device, on_cpu))
    worst = max(diffs)
    trivial = " (device is the CPU: the comparison is trivial)" if device.type == "cpu" else ""
    return {
        "status": "PASS" if worst <= SCORE_TOLERANCE else "FAIL",
        "model": plan.scores_model, "skip": plan.scores_skip, "items": len(pairs), "device": str(device),
        "max_abs_diff": worst, "mean_abs_diff": sum(diffs) / len(diffs), "greedy_mismatches": greedy,
        "tolerance": SCORE_TOLERANCE, "scores_device": [s for s, _ in on_device],
        "scores_cpu": [s for s, _ in on_cpu], "reason": trivial.strip(" ()") or None,
    }
