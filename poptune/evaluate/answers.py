"""Fidelity without labels: a configuration's greedy answers to a user's prompts against the full model's.

The full model's greedy answer to each prompt is generated once per model in this process (a study's full run
comes first) and kept on the model (:func:`full_answers`). A configuration's answer to the same prompt is then
scored against it, per prompt:

- ``unchanged``: 1 when its greedy answer is token for token the full model's (the item's outcome: the
  study's accuracy is the share of answers unchanged, its drop the share changed, in points);
- ``agreement``: the share of the full answer's positions where the two answers hold the same token;
- ``divergence``: the first position where they differ (None: identical);
- ``loglik``: the mean per-token log-likelihood of the *full* answer under this configuration's prefill
  (teacher-forced scoring, :func:`poptune.evaluate.scoring.continuation_logprobs`: a prefill, no generation;
  with state reuse the layers before the skipped block are replayed);
- ``prob``: the mean over the full answer's tokens of their probability in that same scoring (the exponent of
  each token's log-likelihood, then averaged): in [0, 1], so task :data:`~poptune.evaluate.prompts.LIKELIHOOD`
  makes it the item's outcome and its paired drop is a continuous budget (a mean of probabilities, not of
  logs, because a bounded outcome is what the paired score interval is valid for; one very unlikely token
  moves it by at most ``1 / len(answer)``). A full answer with no token (the model stopped at once) has
  nothing to score: its ``prob`` is None and the likelihood outcome is ``unchanged`` (still [0, 1]);
- ``correct``: when the request gives a reference ``answer``, whether the generated answer contains it
  (case and surrounding space ignored), for the drop on the references. Task
  :data:`~poptune.evaluate.prompts.REFERENCES` (the requests with a reference) makes it the item's outcome, the
  full model's and POP's alike: a study's budget is then a drop on the references.
- ``correct`` and ``full_correct``, for a task pack's item judged by likelihood (a request with a ``grade``): the
  task's own metric of this configuration's answer and of the full model's (SQuAD's exact match, a synthetic
  task's number), so the items that flipped under the accuracy judge are known beside the likelihood's outcome.

Answers end at the request's ``max_tokens`` or the end-of-sequence token, whichever comes first (and before the
first of its ``stop`` sequences, where it has some: a task pack's item, :mod:`poptune.evaluate.judges`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from poptune import progress
from poptune.engine import PopConfig, apply_pop, remove_pop
from poptune.errors import ConfigError
from poptune.evaluate.prompts import (
    LIKELIHOOD,
    PROMPT_TASKS,
    PROMPTS,
    REFERENCES,
    PromptRequest,
    encode,
    prompt_hash,
    read_prompts,
)

__all__ = ["ITEMS_KEY", "PromptRun", "contains_answer", "full_answers", "outcome", "score_prompts", "score_requests",
           "summary", "unanswered"]

#: Key of a run's per-item prompt figures in ``TaskRun.details`` (item index -> figures).
ITEMS_KEY = "prompt_items"

_ATTR = "_poptune_full_answers"


@dataclass
class PromptRun:
    """A ``TaskRun``'s fields for task ``prompts`` (:class:`poptune.evaluate.suite.TaskRun` has the same)."""

    scores: dict[str, dict[str, float]]
    items: dict[str, list[int]]
    outcomes: dict[str, list[float]]
    details: dict[str, Any]


def full_answers(model: Any) -> dict[str, tuple[int, ...]]:
    """The full model's greedy answers kept on ``model``: prompt key -> answer token ids."""
    from poptune.engine import decoder_of

    decoder = decoder_of(model)
    if not hasattr(decoder, _ATTR):
        setattr(decoder, _ATTR, {})
    return getattr(decoder, _ATTR)


def contains_answer(output: str, answer: str) -> bool:
    """Whether ``output`` contains the reference ``answer`` (case and surrounding space ignored)."""
    return answer.strip().lower() in output.lower()


def _key(ids: Sequence[int], max_tokens: int, stop: Sequence[str] = ()) -> str:
    return prompt_hash(",".join(map(str, ids)) + f"/{max_tokens}" + ("".join(f"/{s!r}" for s in stop)))


def _cut(tokenizer: Any, tokens: tuple[int, ...], stop: Sequence[str]) -> tuple[int, ...]:
    """``tokens`` up to where their text reaches the first of the ``stop`` sequences (all of them without one):
    the longest prefix whose text ends at or before it, as a task's ``until`` cuts its generated text."""
    if not stop or not tokens:
        return tokens
    text = tokenizer.decode(list(tokens), skip_special_tokens=False, clean_up_tokenization_spaces=False)
    at = min((text.find(s) for s in stop if s and s in text), default=-1)
    if at < 0:
        return tokens
    for j in range(1, len(tokens) + 1):
        head = tokenizer.decode(list(tokens[:j]), skip_special_tokens=False, clean_up_tokenization_spaces=False)
        if len(head) > at:
            return tokens[:j - 1]
    return tokens


def _trim(tokens: Sequence[int], limit: int, stops: set[int]) -> tuple[int, ...]:
    out = []
    for t in list(tokens)[:limit]:
        if t in stops:
            break
        out.append(int(t))
    return tuple(out)


def _padded(model: Any, tokenizer: Any, prompts: list[list[int]]) -> tuple[Any, Any, int]:
    """``prompts`` left-padded as one batch: ids, attention mask and the pad id."""
    import torch

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    width = max(map(len, prompts))
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=model.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=model.device)
    return ids, mask, pad


def _answers_of(model: Any, tokenizer: Any, sequences: Any, width: int, limits: list[int],
                pad: int) -> list[tuple[int, ...]]:
    """Each row's generated tokens up to its limit and its first end-of-sequence (or pad) token."""
    stops = {t for t in (tokenizer.eos_token_id, pad) if t is not None}
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    stops |= set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    return [_trim(row[width:].tolist(), n, stops) for row, n in zip(sequences, limits)]


def _generate(model: Any, tokenizer: Any, prompts: list[list[int]], limits: list[int], prefill_chunk: int | None,
              *, scored: bool = False, stops: Sequence[Sequence[str]] | None = None,
              ) -> tuple[list[tuple[int, ...]], list[Any]]:
    """Greedy answers, each cut at its ``stops``; with ``scored``, each row's log-probabilities of its own answer
    too, scored as a configuration scores it: over the same prefill, the answer fed as one forward
    (:func:`poptune.engine.speculate.generate_own_scored`: no second prefill). Where greedy generation is not
    replayed so (image prompts, Qwen3-VL), ``generate`` answers and the scores are None: the caller scores the
    answers by a prefill (:func:`_loglik`), as it scores a configuration's there, so the pair's two sides are
    always read the same way."""
    import torch

    from poptune.engine.greedy import replayable
    from poptune.engine.segments import generate
    from poptune.engine.speculate import generate_own_scored

    ids, mask, pad = _padded(model, tokenizer, prompts)
    cuts = list(stops) if stops is not None else [()] * len(prompts)

    def answers_of(sequences: Any) -> list[tuple[int, ...]]:
        return [_cut(tokenizer, a, stop)
                for a, stop in zip(_answers_of(model, tokenizer, sequences, ids.shape[1], limits, pad), cuts)]

    inputs = {"input_ids": ids, "attention_mask": mask}
    if scored and replayable(model, inputs, {"max_new_tokens": max(limits), "do_sample": False, "pad_token_id": pad}):
        sequences, own = generate_own_scored(model, inputs, limits=limits, pad_token_id=pad, answers_of=answers_of,
                                             chunk=prefill_chunk, stopping=_stopping(tokenizer, ids.shape[1], cuts))
        return answers_of(sequences), own
    with torch.no_grad():
        out = generate(model, inputs, chunk=prefill_chunk, max_new_tokens=max(limits), do_sample=False,
                       pad_token_id=pad)
    answers = answers_of(out)
    return answers, [None] * len(answers)


def _generate_scored(model: Any, tokenizer: Any, prompts: list[list[int]], limits: list[int],
                     drafts: Sequence[Sequence[int]], prefill_chunk: int | None,
                     stops: Sequence[Sequence[str]] | None = None) -> tuple[list[tuple[int, ...]], list[Any]]:
    """A configuration's greedy answers and its log-probabilities of the full answers ``drafts``, from one
    prefill (:func:`poptune.engine.speculate.generate_scored`); a row ends once its text holds one of its
    ``stops``."""
    from poptune.engine.speculate import generate_scored

    ids, mask, pad = _padded(model, tokenizer, prompts)
    sequences, scores = generate_scored(model, {"input_ids": ids, "attention_mask": mask}, drafts,
                                        limits=limits, pad_token_id=pad, chunk=prefill_chunk,
                                        stopping=_stopping(tokenizer, ids.shape[1], stops))
    return _answers_of(model, tokenizer, sequences, ids.shape[1], limits, pad), scores


class _StopText:
    """Stopping criteria: a row ends once its generated text holds one of its stop sequences. Its answer is cut
    there anyway (:func:`_cut`, which reads only the text before the first of them), so what it would generate
    after is never read: lm-eval's ``until`` ends generation there too."""

    def __init__(self, tokenizer: Any, start: int, stops: Sequence[Sequence[str]]) -> None:
        self.tokenizer, self.start, self.stops = tokenizer, start, [[s for s in stop if s] for stop in stops]

    def __call__(self, sequences: Any, scores: Any) -> Any:
        import torch

        done = []
        for row, stop in zip(sequences, self.stops):
            text = self.tokenizer.decode(row[self.start:].tolist(), skip_special_tokens=False,
                                         clean_up_tokenization_spaces=False) if stop else ""
            done.append(any(s in text for s in stop))
        return torch.tensor(done, dtype=torch.bool, device=sequences.device)


def _stopping(tokenizer: Any, start: int, stops: Sequence[Sequence[str]] | None) -> Any:
    """A maker of :class:`_StopText` for rows whose answers begin at ``start`` (None: no row has a stop)."""
    return (lambda: _StopText(tokenizer, start, stops)) if stops is not None and any(stops) else None


def _one_prefill(model: Any, tokenizer: Any, prompts: list[list[int]], limits: list[int]) -> bool:
    """Whether a configuration's answers and scores can come from one prefill here: POP applied, and greedy
    generation that :mod:`poptune.engine.greedy` replays (text prompts, a bare argmax, not Qwen3-VL)."""
    from poptune.engine import get_pop_config
    from poptune.engine.greedy import replayable

    config = get_pop_config(model)
    if config is None or config.skip == 0:
        return False
    ids, mask, pad = _padded(model, tokenizer, prompts[:1])
    return replayable(model, {"input_ids": ids, "attention_mask": mask},
                      {"max_new_tokens": max(limits), "do_sample": False, "pad_token_id": pad})


def _loglik(model: Any, tokenizer: Any, prompts: list[list[int]], answers: list[tuple[int, ...]],
            prefill_chunk: int | None) -> list[tuple[float, float] | None]:
    """Per prompt, the mean log-likelihood and the mean probability of its answer's tokens (None: no token)."""
    import torch

    from poptune.evaluate.scoring import continuation_logprobs

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    scored = [i for i, a in enumerate(answers) if a]
    found: list[tuple[float, float] | None] = [None] * len(prompts)
    if scored:
        logps = continuation_logprobs(model, [prompts[i] for i in scored], [list(answers[i]) for i in scored],
                                      pad_id=pad, prefill_chunk=prefill_chunk)
        for i, logp in zip(scored, logps):
            target = torch.tensor(answers[i], dtype=torch.long, device=logp.device).unsqueeze(1)
            found[i] = _means(logp.gather(1, target).squeeze(1))
    return found


def _means(picked: Any) -> tuple[float, float]:
    """The mean log-likelihood and the mean probability of an answer's tokens from their log-probabilities."""
    picked = picked.float()
    return float(picked.mean()), float(picked.exp().mean())


def _figures(mine: tuple[int, ...], full: tuple[int, ...]) -> dict[str, Any]:
    same = sum(a == b for a, b in zip(mine, full))
    divergence = next((i for i, (a, b) in enumerate(zip(mine, full)) if a != b), None)
    if divergence is None and len(mine) != len(full):
        divergence = min(len(mine), len(full))
    return {"unchanged": float(mine == full), "agreement": same / len(full) if full else float(not mine),
            "divergence": divergence}


def score_prompts(model: Any, tokenizer: Any, config: PopConfig | None, path: str, indices: Sequence[int], *,
                  batch_size: int = 8, prefill_chunk: int | None = None, task: str = PROMPTS) -> PromptRun:
    """Task ``task`` (``prompts``: outcome ``unchanged``; ``prompt_references``: outcome ``correct``, requests
    with a reference only; ``prompt_likelihood``: outcome ``prob``) scored on the requests ``indices`` of
    ``path`` (the suite makes it a ``TaskRun``): :func:`score_requests` on the file's requests.
    """
    return score_requests(model, tokenizer, config, read_prompts(path), indices, batch_size=batch_size,
                          prefill_chunk=prefill_chunk, task=task)


def score_requests(model: Any, tokenizer: Any, config: PopConfig | None,
                   requests: Sequence[PromptRequest] | Mapping[int, PromptRequest], indices: Sequence[int], *,
                   batch_size: int = 8, prefill_chunk: int | None = None, task: str = PROMPTS,
                   name: str | None = None, one_prefill: bool = True) -> PromptRun:
    """Task ``task`` (as :func:`score_prompts`) scored on ``requests[i]`` for ``i`` in ``indices``: a prompts
    file's requests, or a task pack's items read as requests (:func:`poptune.evaluate.workload.task_requests`);
    the run's scores, items and outcomes are named ``name`` (default ``task``).

    With ``config`` None or ``skip=0`` the model as it is answers; answers missing from :func:`full_answers`
    are recorded from whichever run first meets the prompt (the full run, first in a study). The run's
    ``details[ITEMS_KEY]`` holds each item's figures (module docstring) and the prompt's hash and length.
    ``one_prefill``: a batch's answers and scores from one prefill (the default; :func:`_answer`), or the two
    passes it replaces (False: the reference its tests and benchmark compare with).
    """
    chosen = [requests[i] for i in indices]
    prompts = [encode(tokenizer, r) for r in chosen]
    keys = [_key(p, r.max_tokens, r.stop) for p, r in zip(prompts, chosen)]
    kept = full_answers(model)
    missing = [i for i, k in enumerate(keys) if k not in kept]
    pop = config if config is not None and config.skip > 0 else None
    if missing and pop:  # a resumed study's full run came from storage: the full model answers first
        remove_pop(model)
        _answer_into(kept, model, tokenizer, missing, prompts, chosen, keys, batch_size, prefill_chunk)
    if config is not None:  # skip 0 too: the full model's prefills are recorded where prefix states are attached
        apply_pop(model, config)
    try:
        answers, logliks = _answer(model, tokenizer, prompts, [r.max_tokens for r in chosen], batch_size,
                                   prefill_chunk, kept=kept, keys=keys, stops=[r.stop for r in chosen],
                                   one_prefill=one_prefill)
    finally:
        remove_pop(model)
    figures = {}
    for index, request, ids, key, answer, scored in zip(indices, chosen, prompts, keys, answers, logliks):
        row = {**_figures(answer, kept[key]), "loglik": scored[0] if scored else None,
               "prob": scored[1] if scored else None, "hash": prompt_hash(_text(tokenizer, request)),
               "tokens": len(ids)}
        if request.grade is not None:  # a task pack's item: its task's own metric, of both answers
            row["correct"] = float(request.grade(tokenizer.decode(list(answer), skip_special_tokens=True)))
            row["full_correct"] = float(request.grade(tokenizer.decode(list(kept[key]), skip_special_tokens=True)))
        elif request.answer is not None:
            row["correct"] = float(contains_answer(tokenizer.decode(list(answer), skip_special_tokens=True),
                                                   request.answer))
        figures[int(index)] = row
    if task == REFERENCES and any("correct" not in figures[int(i)] for i in indices):
        raise ConfigError(f"task `{REFERENCES}` scores only requests with an `answer`")
    outcomes = [outcome(figures[int(i)], task) for i in indices]
    metric = {REFERENCES: "reference", LIKELIHOOD: "answer_prob"}.get(task, "unchanged")
    named = task if name is None else name
    return PromptRun({named: {metric: sum(outcomes) / len(outcomes)}}, {named: [int(i) for i in indices]},
                     {named: outcomes}, {ITEMS_KEY: figures})


def outcome(row: dict[str, Any], task: str) -> float:
    """An item's outcome in task ``task`` from its figures (module docstring), in [0, 1]."""
    if task == REFERENCES:
        return float(row["correct"])
    if task == LIKELIHOOD and row.get("prob") is not None:
        return float(row["prob"])
    return float(row["unchanged"])


def unanswered(model: Any, tokenizer: Any, path: str, indices: Sequence[int]) -> list[int]:
    """The requests of ``indices`` whose full answer :func:`full_answers` does not hold yet."""
    requests = read_prompts(path)
    kept = full_answers(model)
    return [int(i) for i in indices
            if _key(encode(tokenizer, requests[i]), requests[i].max_tokens, requests[i].stop) not in kept]


def _text(tokenizer: Any, request: PromptRequest) -> str:
    from poptune.evaluate.prompts import render

    return render(tokenizer, request)


#: Padded prompt tokens per batch at most: a user's lengths are mixed (a few long documents among short chats),
#: and one long prompt would otherwise pad a whole batch of short ones to its length.
BATCH_TOKENS = 4096


def _batches(prompts: list[list[int]], batch_size: int) -> list[list[int]]:
    """Indices of ``prompts`` in batches, shortest first: at most ``batch_size`` rows and :data:`BATCH_TOKENS`
    padded tokens (a prompt longer than that is a batch of its own)."""
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    batches: list[list[int]] = []
    for i in order:
        if batches and len(batches[-1]) < batch_size and (len(batches[-1]) + 1) * len(prompts[i]) <= BATCH_TOKENS:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def _answer(model: Any, tokenizer: Any, prompts: list[list[int]], limits: list[int], batch_size: int,
            prefill_chunk: int | None, *, kept: dict[str, tuple[int, ...]] | None = None,
            keys: list[str] | None = None, stops: Sequence[Sequence[str]] | None = None, one_prefill: bool = True,
            ) -> tuple[list[tuple[int, ...]], list[tuple[float, float] | None]]:
    """Greedy answers, batched in order of prompt length (less padding), returned in the order given, each cut
    at its ``stops``; with ``kept``, answers missing there are recorded, and each batch's full answers are scored
    (log-likelihood) in the same rows as its generation (so a POP prefill replays the full model's recorded
    states).

    With ``one_prefill`` (the default) a batch is prefilled once for both: a configuration's answers and its
    scores of the full answers come from one prefill and one forward over those answers
    (:func:`poptune.engine.speculate.generate_scored`), and the full model's score of its own answer from its
    generation's prefill, the answer fed as one forward the same way
    (:func:`poptune.engine.speculate.generate_own_scored`): a pair's two sides are read alike, so a configuration
    that changes nothing scores exactly the full model's figures, in any precision. Rows end once their text holds
    a stop sequence. Without, the two passes: generation to the token limit, then a scoring prefill (the
    reference ``tests/evaluate/test_answers_shared.py`` and ``benchmarks/bench_likelihood_item.py`` compare
    against).
    """
    found: dict[int, tuple[int, ...]] = {}
    logliks: dict[int, tuple[float, float] | None] = {}
    progress.expect(len(prompts))
    for batch in _batches(prompts, batch_size):
        rows, caps = [prompts[i] for i in batch], [limits[i] for i in batch]
        drafts = [kept[keys[i]] for i in batch if keys[i] in kept] if kept is not None and keys is not None else []
        if one_prefill and len(drafts) == len(batch) and _one_prefill(model, tokenizer, rows, caps):
            outs, scores = _generate_scored(model, tokenizer, rows, caps, drafts, prefill_chunk,
                                            None if stops is None else [stops[i] for i in batch])
            scored = drafts
        else:
            outs, scores = _generate(model, tokenizer, rows, caps, prefill_chunk,
                                     scored=one_prefill and kept is not None,
                                     stops=None if stops is None else [stops[i] for i in batch])
            scored = list(outs)
        if stops is not None:  # cut at the stops (a no-op on the answers _generate already cut)
            outs = [_cut(tokenizer, out, stops[i]) for i, out in zip(batch, outs)]
        found.update(zip(batch, outs))
        if kept is not None and keys is not None:
            for i in batch:
                kept.setdefault(keys[i], found[i])
            full = [kept[keys[i]] for i in batch]
            # A row's score is read where its tokens begin with the full answer; the rest are scored by a prefill.
            usable = [s is not None and tuple(t[: len(a)]) == a for s, t, a in zip(scores, scored, full)]
            for i, s, a, ok in zip(batch, scores, full, usable):
                if ok:
                    logliks[i] = _means(s[: len(a)]) if a else None
            redo = [j for j, ok in enumerate(usable) if not ok]
            if redo:
                again = _loglik(model, tokenizer, [rows[j] for j in redo], [full[j] for j in redo], prefill_chunk)
                logliks.update(zip([batch[j] for j in redo], again))
        progress.advance(len(batch))
    return [found[i] for i in range(len(prompts))], [logliks.get(i) for i in range(len(prompts))]


def _answer_into(kept: dict[str, tuple[int, ...]], model: Any, tokenizer: Any, which: list[int],
                 prompts: list[list[int]], requests: list[PromptRequest], keys: list[str], batch_size: int,
                 prefill_chunk: int | None) -> None:
    answers, _ = _answer(model, tokenizer, [prompts[i] for i in which], [requests[i].max_tokens for i in which],
                         batch_size, prefill_chunk, stops=[requests[i].stop for i in which])
    for i, answer in zip(which, answers):
        kept[keys[i]] = answer


def summary(full: Any, run: Any) -> dict[str, Any]:
    """What a measurement stores of its prompt figures: means over its items, never a prompt's text.

    ``full`` and ``run``: the full model's and the configuration's runs (``TaskRun``) on the same items.
    Returns the mean agreement and log-likelihoods, the median first divergence of changed answers, and with
    references the share of answers containing them on each side and their paired drop in points.
    """
    rows = run.details.get(ITEMS_KEY, {})
    full_rows = full.details.get(ITEMS_KEY, {}) if full is not None else {}
    items = [i for task in PROMPT_TASKS for i in run.items.get(task, []) if i in rows]
    if not items:
        return {}
    div = sorted(rows[i]["divergence"] for i in items if rows[i]["divergence"] is not None)
    ll = _present(rows, items, "loglik")
    full_ll = _present(full_rows, items, "loglik")
    prob, full_prob = _present(rows, items, "prob"), _present(full_rows, items, "prob")
    out: dict[str, Any] = {
        "prompts": {"items": len(items), "changed": sum(1 - rows[i]["unchanged"] for i in items),
                    "agreement": sum(rows[i]["agreement"] for i in items) / len(items),
                    "median_divergence": div[len(div) // 2] if div else None,
                    "loglik": sum(ll) / len(ll) if ll else None,
                    "full_loglik": sum(full_ll) / len(full_ll) if full_ll else None,
                    "prob": sum(prob) / len(prob) if prob else None,
                    "full_prob": sum(full_prob) / len(full_prob) if full_prob else None}}
    refs = [i for i in items if "correct" in rows[i] and "correct" in full_rows.get(i, {})]
    if refs:
        from poptune.evaluate.paired import paired_drop

        drop = paired_drop({"reference": [full_rows[i]["correct"] for i in refs]},
                           {"reference": [rows[i]["correct"] for i in refs]}, lower_is_better=[], scale=100.0)
        out["reference"] = {"items": len(refs), "full": sum(full_rows[i]["correct"] for i in refs) / len(refs),
                            "pop": sum(rows[i]["correct"] for i in refs) / len(refs), "drop": drop.to_dict()}
    return out


def _present(rows: dict[int, dict[str, Any]], items: list[int], key: str) -> list[float]:
    """The items' ``key`` figures where present (a row from before the figure existed has none)."""
    return [rows[i][key] for i in items if i in rows and rows[i].get(key) is not None]
