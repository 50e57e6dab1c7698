"""The prompts workload's null reference: the full model against itself under a change that should not matter.

Greedy answers of a few dozen tokens flip on any near-tie, so a configuration whose logits barely move still
changes some of them, and "answers unchanged" read alone can only say "no candidate". The null reference
measures how many of them this model's own numerical noise changes: the full model answers the same prompts
once more in another **batch composition** and is scored exactly like a configuration against its kept answers
(:func:`poptune.evaluate.answers.score_prompts`: unchanged, agreement, first divergence, the full answer's
log-likelihood and token probability). Each prompt answers alone (batch 1, unpadded) where the study batches
them, in pairs (padded) where it runs them one at a time. A batch's composition changes the matrices' shapes,
hence the kernels' order of summation and their rounding, and nothing else: padding is masked and positions
come from the mask, so in exact arithmetic no answer would change. Another dtype would be a perturbation too,
but not a harmless one (bfloat16 is a different model in the low bits), and it would load the weights twice.

Read POP's change rate beside it: a configuration that changes no more answers than the null does changes
nothing this model's own noise would not. Under ``--judge likelihood`` the null's paired drop in the mean
answer-token probability (the full model as the study runs it minus the perturbed one, in points, on the same
items) is that budget's noise floor: "POP drops it by at most X points" next to "the noise drops it by Y".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from poptune.errors import ConfigError

__all__ = ["null_batch", "null_reference"]


def null_batch(batch_size: int) -> int:
    """The batch size of the null's answers: one where the reference batches its prompts, else two."""
    return 1 if batch_size > 1 else 2


def null_reference(model: Any, tokenizer: Any, path: str, full_rows: Mapping[int, Mapping[str, Any]], *,
                   batch_size: int, prefill_chunk: int | None = None) -> dict[str, Any]:
    """The full model's answers to the requests of ``full_rows`` at :func:`null_batch` of ``batch_size``, scored
    against its kept answers (module docstring).

    Args:
        model, tokenizer: The model as it is (no POP applied), its full answers kept on it (after its run).
        path: The prompts file.
        full_rows: The full model's per-item figures in the run it is the reference of (file index -> figures,
            ``details[ITEMS_KEY]``), whose items the null answers.
        batch_size, prefill_chunk: How that run batched and prefilled its prompts.

    Returns:
        What a study stores of it (means only, never a prompt): ``perturbation`` (in words) and ``batch_size``;
        ``items``, ``changed``, ``agreement``, ``median_divergence``, ``loglik`` and ``prob`` with the reference's
        ``full_loglik`` and ``full_prob`` (:func:`poptune.evaluate.answers.summary`); ``prob_drop``, the paired
        drop of the likelihood outcome in points (:class:`~poptune.evaluate.paired.PairedDrop` as a dict).

    Raises:
        ConfigError: no items, or a request whose full answer is not kept on the model.
    """
    from poptune.evaluate.answers import ITEMS_KEY, PromptRun, outcome, score_prompts, summary, unanswered
    from poptune.evaluate.paired import paired_drop
    from poptune.evaluate.prompts import LIKELIHOOD, PROMPTS

    indices = sorted(int(i) for i in full_rows)
    if not indices:
        raise ConfigError("the null reference needs at least one prompt the full model answered")
    if unanswered(model, tokenizer, path, indices):
        raise ConfigError("the null reference needs the full model's answers kept on the model: score the full "
                          "model on these prompts first")
    size = null_batch(batch_size)
    run = score_prompts(model, tokenizer, None, path, indices, batch_size=size, prefill_chunk=prefill_chunk)
    rows = run.details[ITEMS_KEY]
    full = PromptRun({}, {PROMPTS: indices}, {}, {ITEMS_KEY: {i: dict(full_rows[i]) for i in indices}})
    figures = summary(full, run)["prompts"]
    drop = paired_drop({LIKELIHOOD: [outcome(dict(full_rows[i]), LIKELIHOOD) for i in indices]},
                       {LIKELIHOOD: [outcome(rows[i], LIKELIHOOD) for i in indices]}, scale=100.0)
    said = (f"each prompt alone, batch 1 and unpadded, where the reference batches up to {batch_size}" if size == 1
            else "prompts in pairs, batch 2 and padded, where the reference runs them one at a time")
    return {"perturbation": said, "batch_size": size, **figures, "prob_drop": drop.to_dict()}
