"""Greedy POP generation verified against the full model's own answer: exact, and cheaper when they agree.

A study scores the full model first (its prefix states are recorded then, :mod:`poptune.prefix`), and its
greedy answer to each prompt is kept too. A POP configuration changes only the prompt's prefill; decode is
the full model. So where POP's answer equals the full model's, its decode steps can be checked in one forward
instead of run one by one:

1. the POP prefill and the first token, as ``generate`` makes them;
2. the full model's answer (the *draft*) fed after that token as one forward at full depth (stage
   ``decode``): the argmax at each position is the greedy token there, given the tokens before it. The longest
   prefix where argmax equals the draft is accepted, plus the argmax after it;
3. lm-eval's stopping criteria, ``max_length`` and EOS replayed over the accepted tokens one step at a time,
   exactly as ``generate`` calls them; if generation stops inside them, that is the output;
4. otherwise greedy decoding continues with ``generate`` from the first token it did not accept, on the cache
   as it was before step 2 with the accepted tokens fed back (Gemma-3's sliding-window cache layers cannot
   be cropped, so a copy is kept).

The output is what plain greedy generation gives, up to float rounding (a multi-token forward sums in another
order than one token at a time). Anything else runs plain generation: sampling, beams, logits processors
(repetition penalty, ...), stop strings, image prompts, Qwen3-VL (mRoPE positions), a row without a draft,
and a batch some of whose rows finished inside the accepted tokens while others did not (``generate`` cannot
be resumed with rows already finished). Batches of left-padded rows are verified together.

    with states.attached(model):
        with apply_pop(model, PopConfig(skip=0)):
            generate(model, inputs, states=states, max_length=n + 50)   # records the drafts
        with apply_pop(model, PopConfig(skip=6)):
            out = generate(model, inputs, states=states, max_length=n + 50, stopping=make_criteria)
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .engine import get_pop_config, stage
from .models.vision import vision_family
from .segments import generate as plain_generate

if TYPE_CHECKING:
    import torch

    from .prefix import PrefixStates

__all__ = ["generate"]

_TEXT = frozenset({"input_ids", "attention_mask"})


def generate(model: Any, inputs: dict[str, Any], *, states: "PrefixStates | None" = None, chunk: int | None = None,
             stopping: Callable[[], Any] | None = None, **kwargs: Any) -> "torch.Tensor":
    """Greedy or sampled generation as :func:`poptune.segments.generate`, with the full model's answers kept.

    Args:
        model: The model, POP applied or not.
        inputs: ``input_ids`` and optionally ``attention_mask`` (left-padded).
        states: Where the full model's answers are kept (a run of the full model, skip 0, records them) and
            read as drafts (a POP run verifies them); None: plain generation.
        chunk: Prefill in chunks of this many tokens (see :mod:`poptune.segments`).
        stopping: Makes a fresh ``StoppingCriteriaList`` (lm-eval's are stateful); None: none.
        **kwargs: ``generate``'s (``max_length`` or ``max_new_tokens``, ``do_sample``, ``pad_token_id``, ...).

    Returns:
        The sequences, prompt included, as ``generate`` returns them.
    """
    config = get_pop_config(model)
    if states is None or config is None or config.skip == 0:
        out = _plain(model, inputs, chunk, stopping, kwargs)
        if states is not None:
            states.record_drafts(inputs, out, _eos(model, kwargs))
        return out
    drafts = states.drafts(inputs)
    out = None
    if drafts is not None and _greedy(model, inputs, kwargs):
        out = _speculate(model, inputs, drafts, chunk, stopping, dict(kwargs), states)
    if out is None:
        if drafts is not None:
            states.fallbacks += 1
        out = _plain(model, inputs, chunk, stopping, kwargs)
    return out


def _plain(model: Any, inputs: dict[str, Any], chunk: int | None, stopping: Callable[[], Any] | None,
           kwargs: dict[str, Any]) -> "torch.Tensor":
    criteria = stopping() if stopping is not None else None
    extra = {"stopping_criteria": criteria} if criteria is not None else {}
    return plain_generate(model, inputs, chunk=chunk, **extra, **kwargs)


def _eos(model: Any, kwargs: dict[str, Any]) -> set[int]:
    eos = kwargs.get("eos_token_id", model.generation_config.eos_token_id)
    return set() if eos is None else {int(eos)} if isinstance(eos, int) else {int(e) for e in eos}


def _greedy(model: Any, inputs: dict[str, Any], kwargs: dict[str, Any]) -> bool:
    """Whether ``generate`` would pick each token by a bare argmax, with no criteria we cannot replay."""
    if set(k for k, v in inputs.items() if v is not None) - _TEXT or vision_family(model) == "qwen3_vl":
        return False
    if "max_length" not in kwargs and "max_new_tokens" not in kwargs:
        return False
    try:  # transformers' own reading of the arguments: any logits processor changes the argmax
        config, rest = model._prepare_generation_config(None, **kwargs)
        ids = inputs["input_ids"]
        processors = model._get_logits_processor(generation_config=config, input_ids_seq_length=ids.shape[1],
                                                 encoder_input_ids=ids, device=ids.device, model_kwargs=rest)
    except Exception:  # noqa: BLE001 -- an argument we do not understand: generate plainly
        return False
    return (not config.do_sample and config.num_beams == 1 and not processors and not rest
            and config.stop_strings is None and config.max_time is None and not config.return_dict_in_generate
            and getattr(config, "assistant_early_exit", None) is None
            and getattr(config, "prompt_lookup_num_tokens", None) is None)


class _Steps:
    """``generate``'s bookkeeping after each new token, replayed: EOS rows padded, criteria, max length."""

    def __init__(self, context: "torch.Tensor", max_length: int, eos: set[int], pad: int, criteria: Any) -> None:
        import torch

        self.seq = context
        self.max_length, self.pad, self.criteria = max_length, pad, criteria
        self.eos = torch.tensor(sorted(eos), dtype=torch.long)
        self.unfinished = torch.ones(context.shape[0], dtype=torch.bool)

    def push(self, tokens: "torch.Tensor") -> bool:
        """Append one token per row; True once every row has finished."""
        import torch

        if len(self.eos):
            tokens = torch.where(self.unfinished, tokens, torch.full_like(tokens, self.pad))
        self.seq = torch.cat([self.seq, tokens[:, None]], dim=-1)
        done = torch.full_like(self.unfinished, self.seq.shape[1] >= self.max_length)
        if self.criteria is not None:
            done |= self.criteria(self.seq, None)
        if len(self.eos):
            done |= torch.isin(tokens, self.eos)
        self.unfinished &= ~done
        return not bool(self.unfinished.any())


def _speculate(model: Any, inputs: dict[str, Any], drafts: list[tuple[int, ...]], chunk: int | None,
               stopping: Callable[[], Any] | None, kwargs: dict[str, Any], states: "PrefixStates") -> Any:
    """Steps 1-4 of the module's description; None where plain generation must run instead."""
    import torch

    ids = inputs["input_ids"]
    n = ids.shape[1]
    mask = inputs.get("attention_mask")
    mask = torch.ones_like(ids) if mask is None else mask
    new = kwargs.pop("max_new_tokens", None)
    max_length = n + new if new is not None else kwargs.pop("max_length")
    kwargs.pop("max_length", None)
    pad = kwargs.get("pad_token_id", model.generation_config.pad_token_id)
    eos = _eos(model, kwargs)
    if max_length < n + 2 or pad is None and eos:
        return None
    first = plain_generate(model, {"input_ids": ids, "attention_mask": mask}, chunk=chunk, max_length=n + 1,
                           return_dict_in_generate=True, **kwargs)
    steps = _Steps(ids, max_length, eos, int(pad or 0), stopping() if stopping is not None else None)
    cache = first.cache
    if steps.push(first.sequences[:, n]):
        return steps.seq
    fed = _fed(steps.seq[:, n], drafts, max_length - n - 1, int(pad or 0))
    if fed is not None:
        known, cache = _verify(model, steps.seq, mask, fed, cache)
        for s in range(1, known.shape[1]):
            if steps.push(known[:, s]):
                states.drafted += ids.shape[0]
                states.accepted += ids.shape[0] * s
                return steps.seq
        if not bool(steps.unfinished.all()):
            return None  # generate restarts every row as unfinished: it cannot resume this batch exactly
        states.drafted += ids.shape[0]
        states.accepted += ids.shape[0] * (known.shape[1] - 1)
    full_mask = torch.cat([mask, mask.new_ones(mask.shape[0], steps.seq.shape[1] - n)], dim=-1)
    extra = {"stopping_criteria": steps.criteria} if steps.criteria is not None else {}
    with stage(model, "decode"):
        return model.generate(input_ids=steps.seq, attention_mask=full_mask, cache=cache, max_length=max_length,
                              **extra, **kwargs)


def _fed(first: "torch.Tensor", drafts: list[tuple[int, ...]], limit: int, pad: int) -> "torch.Tensor | None":
    """(B, k): each row's first token, then its draft after the draft's first token; None when not worth a
    forward (a draft that does not start with the token generated, or nothing to verify)."""
    import torch

    k = min(max(len(d) for d in drafts), limit)
    if k < 2 or any(not d or d[0] != int(t) for d, t in zip(drafts, first)):
        return None
    rows = [[int(t), *d[1:k]] for t, d in zip(first, drafts)]
    return torch.tensor([row + [pad] * (k - len(row)) for row in rows], dtype=torch.long, device=first.device)


def _verify(model: Any, seq: "torch.Tensor", mask: "torch.Tensor", fed: "torch.Tensor",
            cache: Any) -> tuple["torch.Tensor", Any]:
    """Feed ``fed`` at full depth over ``cache`` (prompt only). Returns the tokens known to be greedy, ``fed``'s
    first included, (B, K), and a cache holding the prompt and all of them but the last."""
    import torch

    k = fed.shape[1]
    backup = copy.deepcopy(cache)
    argmax = _forward(model, fed, mask, cache).argmax(dim=-1)  # (B, k)
    match = (argmax[:, :-1] == fed[:, 1:]).long().cumprod(dim=-1).sum(dim=-1)  # (B,): leading draft tokens accepted
    common = int(match.min())
    known = torch.cat([fed[:, : common + 1], argmax[:, common : common + 1]], dim=-1)  # (B, common + 2)
    if common == k - 1:
        return known, cache  # every fed token was right: the cache holds exactly them
    _forward(model, fed[:, : common + 1], mask, backup, logits=1)  # the accepted tokens fed back
    return known, backup


def _forward(model: Any, tokens: "torch.Tensor", mask: "torch.Tensor", cache: Any, logits: int = 0) -> "torch.Tensor":
    """Logits of a multi-token forward at full depth after ``cache`` (its length past ``mask``: none)."""
    import torch

    past = cache.get_seq_length()
    full = torch.cat([mask, mask.new_ones(mask.shape[0], past - mask.shape[1] + tokens.shape[1])], dim=-1)
    positions = (full.long().cumsum(-1) - 1).masked_fill(full == 0, 0)[:, -tokens.shape[1]:]
    with stage(model, "decode"), torch.no_grad():
        out = model(input_ids=tokens, attention_mask=None if bool((full == 1).all()) else full,
                    position_ids=positions, cache=cache, use_cache=True, logits_to_keep=logits)
    return out.logits.float()
