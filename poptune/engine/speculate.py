"""Greedy POP generation verified in rounds against proposals: exact, and cheaper where they hold.

A study scores the full model first (its prefix states are recorded then, :mod:`poptune.engine.prefix`), and its
greedy answer to each prompt is kept too. A POP configuration changes only the prompt's prefill; decode is
the full model. So its decode steps can be checked several at a time instead of run one by one, as in
speculative decoding with the full model's answer as the draft:

1. the POP prefill and the first token, as ``generate`` makes them;
2. rounds: the last token and a *proposal* fed as one forward at full depth (stage ``decode``); the argmax at
   each position is the greedy token there, given the tokens before it, so the longest prefix of the proposal
   that equals the argmax is accepted, and the argmax after it is the round's own new token. The cache is
   cropped back to the accepted tokens (Gemma-3's sliding-window layers keep their past for that while
   decoding: ``activate_past_recording``). A round without a proposal is one ordinary decode step;
3. after every token, ``generate``'s bookkeeping replayed exactly: rows that ended get pads, lm-eval's
   stopping criteria (stateful) are called once per step, ``max_length`` and EOS stop.

The proposal is the full model's answer while POP's agrees with it; after they part, what followed the last
two or three tokens where they occur last in that answer, in the answer so far, or in the prompt (reading
comprehension copies spans; answers rejoin; small models repeat: prompt-lookup decoding). Its size starts at
:data:`FIRST` tokens, doubles after a round wholly accepted and falls back to :data:`LEAST` after one that
was not: a forward of k tokens costs more than one decode step (each position needs the whole LM head).

The output is what plain greedy generation gives, up to float rounding (a multi-token forward sums in another
order than one token at a time). Anything else runs plain generation: sampling, beams, logits processors
(repetition penalty, ...), stop strings, image prompts, Qwen3-VL (mRoPE positions) and a batch with a row
whose prompt the full model did not answer. Batches of left-padded rows are verified together (a round
accepts what every live row accepts).

    with states.attached(model):
        with apply_pop(model, PopConfig(skip=0)):
            generate(model, inputs, states=states, max_length=n + 50)   # records the answers
        with apply_pop(model, PopConfig(skip=6)):
            out = generate(model, inputs, states=states, max_length=n + 50, stopping=make_criteria)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from poptune.engine.greedy import Steps, decode_forward, decode_logits, eos_ids, greedy_pick, replayable
from poptune.engine.pop import get_pop_config
from poptune.engine.segments import generate as plain_generate

if TYPE_CHECKING:
    import torch

    from poptune.engine.prefix import PrefixStates

__all__ = ["generate", "generate_own_scored", "generate_scored"]

#: Tokens proposed in the first round; a round wholly accepted doubles the size, up to the most, and a round
#: not wholly accepted starts again from the least. A proposal of k tokens costs a forward of k + 1 tokens.
FIRST, LEAST, MOST = 8, 4, 64
#: Sizes of the n-grams looked up, longest first.
NGRAMS = (3, 2)


def generate(model: Any, inputs: dict[str, Any], *, states: "PrefixStates | None" = None, chunk: int | None = None,
             stopping: Callable[[], Any] | None = None, **kwargs: Any) -> "torch.Tensor":
    """Greedy or sampled generation as :func:`poptune.engine.segments.generate`, with the full model's answers kept.

    Args:
        model: The model, POP applied or not.
        inputs: ``input_ids`` and optionally ``attention_mask`` (left-padded).
        states: Where the full model's answers are kept (a run of the full model, skip 0, records them) and
            read as drafts (a POP run verifies them); None: plain generation.
        chunk: Prefill in chunks of this many tokens (see :mod:`poptune.engine.segments`).
        stopping: Makes a fresh ``StoppingCriteriaList`` (lm-eval's are stateful); None: none.
        **kwargs: ``generate``'s (``max_length`` or ``max_new_tokens``, ``do_sample``, ``pad_token_id``, ...).

    Returns:
        The sequences, prompt included, as ``generate`` returns them.
    """
    config = get_pop_config(model)
    if states is None or config is None or config.skip == 0:
        plain = _plain(model, inputs, chunk, stopping, kwargs)
        if states is not None:
            states.record_drafts(inputs, plain, eos_ids(model, kwargs))
        return plain
    drafts = states.drafts(inputs)
    out = None
    if drafts is not None and replayable(model, inputs, kwargs):
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


def _speculate(model: Any, inputs: dict[str, Any], drafts: list[tuple[int, ...]], chunk: int | None,
               stopping: Callable[[], Any] | None, kwargs: dict[str, Any], states: "PrefixStates") -> Any:
    """The module's loop; None where plain generation must run instead."""
    import torch

    ids = inputs["input_ids"]
    n = ids.shape[1]
    mask = inputs.get("attention_mask")
    mask = torch.ones_like(ids) if mask is None else mask
    new = kwargs.pop("max_new_tokens", None)
    max_length = n + new if new is not None else kwargs.pop("max_length")
    kwargs.pop("max_length", None)
    pad = kwargs.get("pad_token_id", model.generation_config.pad_token_id)
    eos = eos_ids(model, kwargs)
    if pad is None and eos:
        return None  # generate would pad finished rows with an EOS token and warn: leave that to it
    first = plain_generate(model, {"input_ids": ids, "attention_mask": mask}, chunk=chunk, max_length=n + 1,
                           return_dict_in_generate=True, **kwargs)
    steps = Steps(ids, max_length, eos, int(pad or 0), _made(stopping))
    states.drafted += ids.shape[0]
    if steps.push(first.sequences[:, n]):
        return steps.seq
    cache = first.cache
    cache.activate_past_recording()  # sliding-window layers keep what a rejected proposal would need back
    return _rounds(model, steps, cache, mask, _Proposer(ids, mask, drafts), states)


def _rounds(model: Any, steps: Steps, cache: Any, mask: "torch.Tensor", proposer: "_Proposer",
            states: "PrefixStates | None") -> "torch.Tensor":
    """Rounds until every row has ended; ``cache`` holds every token of ``steps.seq`` but its last."""
    import torch

    size = FIRST
    while True:
        budget = min(size, steps.max_length - steps.seq.shape[1] - 1)
        proposal = proposer.propose(steps, budget) if budget > 0 else None
        fed = steps.seq[:, -1:] if proposal is None else torch.cat([steps.seq[:, -1:], proposal], dim=-1)
        tokens = _round(model, fed, mask, cache, steps.padded())
        if states is not None:
            states.accepted += tokens.shape[1] - 1
        if proposal is not None:
            size = min(2 * size, MOST) if tokens.shape[1] > proposal.shape[1] else LEAST
        for s in range(tokens.shape[1]):
            if steps.push(tokens[:, s]):
                return steps.seq


def generate_scored(model: Any, inputs: dict[str, Any], drafts: Sequence[Sequence[int]], *,
                    limits: Sequence[int], pad_token_id: int, chunk: int | None = None,
                    stopping: Callable[[], Any] | None = None) -> tuple["torch.Tensor", list["torch.Tensor"]]:
    """POP's greedy answers and the log-probabilities of the full model's answers, from one prefill.

    A likelihood judge needs both for each prompt: the configuration's greedy answer, and each token of the full
    model's answer (``drafts``) scored teacher-forced after the configuration's prefill
    (:func:`poptune.evaluate.scoring.continuation_logprobs`). Both start from the same prefill, and the scoring's
    forward -- every draft token fed at full depth -- also gives the greedy token at each of those positions:

    1. the prompt prefilled once (POP, with its boundary rule; :func:`~poptune.engine.segments.prefill_prompt`);
    2. every row's whole draft fed as one forward at full depth (stage ``decode``): its log-probabilities are the
       scoring's, and its argmax says how far the greedy answer follows the draft and which token it takes there;
    3. those tokens taken with ``generate``'s bookkeeping (:class:`~poptune.engine.greedy.Steps`); where a row
       goes on past them, the cache is cropped to the tokens it holds rightly and the rounds of this module's
       loop decode the rest (proposals verified several at a time).

    A configuration whose answer is the full model's decodes nothing at all. The answers are greedy generation's
    up to float rounding (a multi-token forward sums in another order than one token at a time), as this
    module's loop; ``tests/evaluate/test_answers_shared.py`` compares both with the two passes they replace.

    Args:
        model: The model, POP applied (text prompts; not Qwen3-VL: :func:`~poptune.engine.greedy.replayable`).
        inputs: ``input_ids`` (B, n), left-padded, and ``attention_mask``.
        drafts: Per row, the full model's answer (token ids; may be empty).
        limits: Per row, new tokens at most: a row ends there (the caller cuts it there).
        pad_token_id: What ended rows get.
        chunk: Prefill in chunks of this many tokens.
        stopping: Makes fresh stopping criteria, called after every token as ``generate`` calls them (a row ends
            where they say: its stop text reached, say); None: none.

    Returns:
        The sequences as ``generate`` returns them (prompt included, ended rows padded), and per row the
        log-probabilities of its draft's tokens (len(draft),).
    """
    import torch

    ids = inputs["input_ids"]
    rows, n = ids.shape
    mask, first, cache = _prefilled(model, inputs, chunk)  # the draft's forward is cropped back where a row leaves it
    logits, scores = _drafts_scored(model, first, drafts, mask, cache, pad_token_id)
    greedy = greedy_pick(logits).tolist()
    width = logits.shape[1] - 1  # the longest draft's
    known = []  # per row: the greedy tokens the forward decided (the draft's accepted prefix, then its own)
    for r, draft in enumerate(drafts):
        taken = next((j for j, token in enumerate(draft) if greedy[r][j] != token), len(draft))
        known.append([*draft[:taken], greedy[r][taken]])
    steps = Steps(ids, n + max(limits), eos_ids(model, {}), int(pad_token_id), _made(stopping), limits)
    column = 0
    while True:
        live = steps.unfinished.tolist()
        if any(live[r] and column >= len(known[r]) for r in range(rows)):
            break
        tokens = [known[r][column] if column < len(known[r]) else pad_token_id for r in range(rows)]
        if steps.push(torch.tensor(tokens, dtype=torch.long, device=ids.device)):
            return steps.seq, scores
        column += 1
    # A live row goes on past what the forward decided: every live row's first `column - 1` tokens are its draft's
    # (the cache holds them rightly), so the cache keeps those and the loop decodes on from the last token pushed.
    cache.crop(-(width - column + 1))  # 0 too: sliding-window layers back to their window
    with torch.no_grad():
        return _rounds(model, steps, cache, mask, _Proposer(ids, mask, drafts), None), scores


def generate_own_scored(model: Any, inputs: dict[str, Any], *, limits: Sequence[int], pad_token_id: int,
                        answers_of: Callable[["torch.Tensor"], Sequence[Sequence[int]]], chunk: int | None = None,
                        stopping: Callable[[], Any] | None = None) -> tuple["torch.Tensor", list["torch.Tensor"]]:
    """The model's greedy answers, and each answer's log-probabilities scored as :func:`generate_scored` scores a
    draft.

    A likelihood judge pairs the full model's score of its own answer with a configuration's score of that same
    answer (:func:`generate_scored`). Read two ways -- a token's logits from a one-token decode step, and the same
    logits from one forward over the whole answer -- they differ by rounding (0.006 of a mean token probability
    in bfloat16 on a CPU), and that difference would enter the paired drop as if it were POP's. So here the
    answer is scored as a draft is:

    1. the prompt prefilled once (the model as it is: the full model, recording its layer inputs where prefix
       states are attached, :mod:`poptune.engine.prefix`), positions as :func:`generate_scored`'s;
    2. greedy decode, one token at a time (``generate``'s bookkeeping, :class:`~poptune.engine.greedy.Steps`), the
       cache keeping its whole past (sliding-window layers too);
    3. the cache cropped back to the prompt, and each row's answer (``answers_of``: the tokens a caller keeps,
       cut at its stops) fed as one forward at full depth, exactly as :func:`generate_scored` feeds a draft.

    A configuration that changes nothing therefore scores the full answer bit for bit as the full model does.

    Args:
        model: The model (text prompts; not Qwen3-VL: :func:`~poptune.engine.greedy.replayable`).
        inputs: ``input_ids`` (B, n), left-padded, and ``attention_mask``.
        limits: Per row, new tokens at most.
        pad_token_id: What ended rows get, and the scoring forward's filler.
        answers_of: The generated sequences -> per row, the answer to score (a prefix of the row's new tokens).
        chunk: Prefill in chunks of this many tokens.
        stopping: As :func:`generate_scored`'s.

    Returns:
        The sequences as ``generate`` returns them (prompt included, ended rows padded), and per row the
        log-probabilities of its answer's tokens (len(answer),).
    """
    ids = inputs["input_ids"]
    n = ids.shape[1]
    mask, first, cache = _prefilled(model, inputs, chunk)  # nothing of the prompt dropped until the crop back to it
    steps = Steps(ids, n + max(limits), eos_ids(model, {}), int(pad_token_id), _made(stopping), limits)
    done = steps.push(greedy_pick(first[:, -1]))
    while not done:
        done = steps.push(greedy_pick(decode_forward(model, steps.seq[:, -1:], mask, cache)[:, -1]))
    answers = answers_of(steps.seq)
    cache.crop(-(cache.get_seq_length() - n))  # back to the prompt (0: sliding-window layers to their window)
    return steps.seq, _drafts_scored(model, first, answers, mask, cache, pad_token_id)[1]


def _prefilled(model: Any, inputs: dict[str, Any], chunk: int | None) -> tuple["torch.Tensor", "torch.Tensor", Any]:
    """The prompt prefilled as both scoring engines prefill it: ``generate``'s own positions (left-padded rows count
    from their first token; the decode forwards continue them), the cache recording its past (a crop can go back
    past a sliding window). Returns the attention mask, the last position's logits (B, 1, V) and the cache."""
    import torch

    from poptune.engine.segments import prefill_prompt

    ids = inputs["input_ids"]
    mask = inputs.get("attention_mask")
    mask = torch.ones_like(ids) if mask is None else mask
    positions = model._prepare_position_ids_for_generation(ids, {"attention_mask": mask})
    with torch.no_grad():
        out = prefill_prompt(model, {"input_ids": ids, "attention_mask": mask, "position_ids": positions}, chunk=chunk)
    out.cache.activate_past_recording()
    return mask, out.logits[:, -1:].float(), out.cache


def _made(stopping: Callable[[], Any] | None) -> Any:
    return stopping() if stopping is not None else None


def _drafts_scored(model: Any, first: "torch.Tensor", drafts: Sequence[Sequence[int]], mask: "torch.Tensor",
                   cache: Any, pad_token_id: int) -> tuple["torch.Tensor", list["torch.Tensor"]]:
    """Every row's draft fed as one forward at full depth after the prompt's ``cache`` (stage ``decode``).

    ``first``: the prefill's last logits (B, 1, V). Returns the logits at every position from the prompt's last
    on (B, width + 1, V), and per row the log-probabilities of its draft's tokens (len(draft),)."""
    import torch

    rows = first.shape[0]
    width = max((len(d) for d in drafts), default=0)
    logits = first
    if width:
        fed = torch.full((rows, width), pad_token_id, dtype=torch.long, device=mask.device)
        for r, draft in enumerate(drafts):
            fed[r, : len(draft)] = torch.tensor(list(draft), dtype=torch.long, device=mask.device)
        logits = torch.cat([logits, decode_logits(model, fed, mask, cache)], dim=1)  # (B, width + 1, V)
    scores = []
    for r, draft in enumerate(drafts):
        target = torch.tensor(list(draft), dtype=torch.long, device=logits.device).unsqueeze(1)
        scores.append(torch.log_softmax(logits[r, : len(draft)], dim=-1).gather(1, target).squeeze(1))
    return logits, scores


def _round(model: Any, fed: "torch.Tensor", mask: "torch.Tensor", cache: Any, padded: "torch.Tensor") -> Any:
    """Feed ``fed`` (the last token, then a proposal) at full depth over ``cache``. Returns the tokens now known
    to be greedy: the proposal's accepted prefix and the argmax after it, (B, accepted + 1); ``cache`` is cropped
    to the tokens it holds rightly. Rows in ``padded`` (finished, fed pads) accept anything: pads follow."""
    import torch

    k = fed.shape[1]
    argmax = greedy_pick(decode_forward(model, fed, mask, cache))  # (B, k)
    match = (argmax[:, :-1] == fed[:, 1:]) | padded[:, None]
    accepted = int(match.long().cumprod(dim=-1).sum(dim=-1).min()) if k > 1 else 0
    cache.crop(-(k - 1 - accepted))  # 0: sliding-window layers back to their window
    return torch.cat([fed[:, 1 : accepted + 1], argmax[:, accepted : accepted + 1]], dim=-1)


class _Proposer:
    """What to verify next, per row: the full model's answer while POP's agrees with it; else what followed the
    last :data:`NGRAMS` tokens where they occur last in that answer, in what was generated, or in the prompt."""

    def __init__(self, ids: "torch.Tensor", mask: "torch.Tensor", drafts: Sequence[Sequence[int]]) -> None:
        self.start = ids.shape[1]
        self.drafts = [list(d) for d in drafts]
        self.prompts = [ids[b][mask[b].bool()].tolist() for b in range(ids.shape[0])]
        self.index = [{tuple(p[i : i + size]): i + size for size in NGRAMS for i in range(len(p) - size)}
                      for p in self.prompts]  # n-gram -> where its last occurrence is followed

    def propose(self, steps: Steps, budget: int) -> "torch.Tensor | None":
        """(B, p) proposals, as long as the shortest live row's (rows padded by ``generate``: pads); or None."""
        import torch

        padded = steps.padded().tolist()
        rows = [None if padded[b] else self._row(b, steps.seq[b, self.start:].tolist(), budget)
                for b in range(len(self.drafts))]
        p = min((len(r) for r in rows if r is not None), default=0)
        if p == 0:
            return None
        table = [[steps.pad] * p if r is None else r[:p] for r in rows]
        return torch.tensor(table, dtype=torch.long, device=steps.seq.device)

    def _row(self, b: int, generated: list[int], budget: int) -> list[int]:
        draft = self.drafts[b]
        if len(draft) > len(generated) and draft[: len(generated)] == generated:
            return draft[len(generated) : len(generated) + budget]
        for size in NGRAMS:
            if len(generated) < size:
                continue
            key = tuple(generated[-size:])
            for source, at in ((draft, _last(draft, key)), (generated, _last(generated[:-1], key)),
                               (self.prompts[b], self.index[b].get(key))):
                if at is not None:
                    return source[at : at + budget]
        return []


def _last(tokens: list[int], key: tuple[int, ...]) -> int | None:
    """Where the last occurrence of ``key`` in ``tokens`` is followed, or None."""
    size = len(key)
    for i in range(len(tokens) - size - 1, -1, -1):
        if tuple(tokens[i : i + size]) == key:
            return i + size
    return None
