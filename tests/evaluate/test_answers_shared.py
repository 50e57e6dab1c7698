"""One prefill for a likelihood item: a configuration's greedy answers and its scores of the full model's answers
from one prefill and one forward over those answers (:func:`poptune.engine.speculate.generate_scored`), and the
full model's score of its own answer from its generation's prefill and one forward over it
(:func:`poptune.engine.speculate.generate_own_scored`), give what the two passes they replace give:
the same answers, item for item, and the same scores up to float rounding, for every boundary, offset, K/V
source, chunked prefill, batch and stop sequence, on the tiny architectures and on Gemma-3-270M past its
sliding window."""

from __future__ import annotations

import pytest

from poptune.engine import PopConfig
from poptune.evaluate.answers import ITEMS_KEY, full_answers, score_requests
from poptune.evaluate.prompts import LIKELIHOOD, PromptRequest, encode

CONFIGS = [
    PopConfig(skip=1),
    PopConfig(skip=2, boundary="window-4", offset=1),
    PopConfig(skip=1, boundary="none"),
    PopConfig(skip=2, boundary="window-16", kv="anchor"),
]

WORDS = "the sea rose over the old harbour wall and every boat in the bay turned its bow to the wind".split()


def _requests(n: int, length: int, stops: bool = True) -> dict[int, PromptRequest]:
    """Prompts of mixed lengths (batches pad), mixed answer lengths, some ending at a stop sequence."""
    out = {}
    for i in range(n):
        text = " ".join(WORDS[(i + j) % len(WORDS)] for j in range(length + 7 * i))
        out[i] = PromptRequest(i, f"Story {i}: {text}. Go on:", None, max_tokens=4 + 3 * (i % 3),
                               stop=("\n",) if stops and i % 2 else ())
    return out


def _both(model, tokenizer, configs, requests, *, chunk=None, batch_size=3):
    """Each item's figures for the full model and each of ``configs``, the one-prefill way and the two-pass way
    (full answers kept from the full model's run of the same way): ``{way: [full, *configs' figures]}``."""
    runs = {}
    for one in (True, False):
        full_answers(model).clear()
        items = list(requests)
        runs[one] = [score_requests(model, tokenizer, config, requests, items, batch_size=batch_size,
                                    prefill_chunk=chunk, task=LIKELIHOOD, one_prefill=one).details[ITEMS_KEY]
                     for config in [PopConfig(skip=0), *configs]]
    full_answers(model).clear()
    return runs


def _same(one, two, tolerance):
    assert one.keys() == two.keys()
    for i in one:
        exact = {k: v for k, v in one[i].items() if k not in ("loglik", "prob")}
        assert exact == {k: v for k, v in two[i].items() if k not in ("loglik", "prob")}, i  # the same answers
        for key in ("loglik", "prob"):
            if one[i][key] is None or two[i][key] is None:
                assert one[i][key] is two[i][key] is None, (i, key)
            else:
                assert one[i][key] == pytest.approx(two[i][key], rel=tolerance, abs=tolerance), (i, key)


@pytest.mark.parametrize("name, chunk", [("tiny-llama", None), ("tiny-gemma3", 8), ("tiny-qwen3", None)])
def test_one_prefill_gives_the_two_passes_answers_and_scores(shared, name, chunk):
    model, tokenizer = shared(name)
    runs = _both(model, tokenizer, CONFIGS, _requests(5, 12), chunk=chunk)
    for one, two in zip(runs[True], runs[False]):  # the full model's figures, then each configuration's
        _same(one, two, 1e-4)


@pytest.mark.parametrize("config", [PopConfig(skip=1), PopConfig(skip=2, boundary="window-4", offset=1)])
def test_a_configuration_that_keeps_the_full_answers_decodes_nothing(shared, monkeypatch, config):
    """Where every greedy token is the full answer's, the scoring forward decided them all: no decode step (an
    answer cut at a stop sequence decodes on, as generation did, to be cut at the same place)."""
    from poptune.engine import speculate

    model, tokenizer = shared("tiny-llama")
    rounds = []
    real = speculate._rounds
    monkeypatch.setattr(speculate, "_rounds", lambda *a, **k: rounds.append(1) or real(*a, **k))
    full_answers(model).clear()
    requests = _requests(4, 10, stops=False)
    score_requests(model, tokenizer, PopConfig(skip=0), requests, list(requests), batch_size=4, task=LIKELIHOOD)
    pop = score_requests(model, tokenizer, config, requests, list(requests), batch_size=4, task=LIKELIHOOD)
    full_answers(model).clear()
    unchanged = all(row["unchanged"] == 1.0 for row in pop.details[ITEMS_KEY].values())
    assert bool(rounds) != unchanged  # decoded exactly when some answer left the full model's


@pytest.mark.integration
def test_one_prefill_equals_the_two_passes_on_gemma_past_its_sliding_window(gemma, monkeypatch):
    """A prompt past the 512-token window of Gemma-3's local layers, and a configuration whose answer leaves the
    full one: its cache is cropped back past the window (their recorded past) and the rest decoded."""
    from poptune.engine import speculate

    model, tokenizer = gemma
    request = _requests(1, 540)[0]
    requests = {0: PromptRequest(0, request.prompt, None, max_tokens=8)}
    assert len(encode(tokenizer, requests[0])) > 512
    rounds = []
    real = speculate._rounds
    monkeypatch.setattr(speculate, "_rounds", lambda *a, **k: rounds.append(1) or real(*a, **k))
    runs = _both(model, tokenizer, [PopConfig(skip=9)], requests, batch_size=1)
    assert rounds and runs[True][1][0]["unchanged"] == 0.0  # the crop and the decode after it ran
    for one, two in zip(runs[True], runs[False]):
        _same(one, two, 1e-4)


def _own_and_drafted(model, tokenizer, requests, chunk):
    """The full model's answers and its scores of them (generate_own_scored), and the same answers scored as a
    configuration's drafts are (generate_scored), here by a configuration that changes nothing: the model as is."""
    from poptune.engine.speculate import generate_own_scored, generate_scored
    from poptune.evaluate.answers import _answers_of, _padded

    prompts = [encode(tokenizer, r) for r in requests.values()]
    limits = [r.max_tokens for r in requests.values()]
    ids, mask, pad = _padded(model, tokenizer, prompts)
    inputs = {"input_ids": ids, "attention_mask": mask}
    answers_of = lambda seq: _answers_of(model, tokenizer, seq, ids.shape[1], limits, pad)  # noqa: E731
    sequences, own = generate_own_scored(model, inputs, limits=limits, pad_token_id=pad, answers_of=answers_of,
                                         chunk=chunk)
    answers = answers_of(sequences)
    _, drafted = generate_scored(model, inputs, answers, limits=limits, pad_token_id=pad, chunk=chunk)
    return answers, own, drafted


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


ON_CUDA = [pytest.mark.cuda, pytest.mark.skipif(not _cuda(), reason="needs a CUDA GPU")]


@pytest.mark.parametrize("device, dtype", [("cpu", "float32"), ("cpu", "bfloat16"),
                                           pytest.param("cuda", "bfloat16", marks=ON_CUDA)])
@pytest.mark.parametrize("name, chunk", [("tiny-llama", None), ("tiny-gemma3", 8)])
def test_the_full_answer_is_scored_as_a_configuration_scores_it_bit_for_bit(name, chunk, device, dtype):
    """The two sides of a likelihood pair read the same way: the full model's score of its own answer (decoded,
    then the cache cropped back to the prompt, past tiny-gemma3's sliding window of 8) is bit for bit the score a
    configuration that changes nothing gives it, in bfloat16 too (where a decode step's logits and a forward's
    differ by rounding; on CUDA, the judge's default), so such a configuration's drop is exactly 0."""
    import torch

    from poptune import load_model

    model, tokenizer = load_model(name, device=device, dtype=dtype)
    answers, own, drafted = _own_and_drafted(model, tokenizer, _requests(5, 12, stops=False), chunk)
    assert any(answers) and [len(s) for s in own] == [len(a) for a in answers]
    assert all(torch.equal(a, b) for a, b in zip(own, drafted))


def test_the_full_models_prefills_are_recorded_and_replayed_by_a_configuration(shared):
    """Under prefix states (a study's state reuse), the full model's likelihood scoring records its prompts'
    layer inputs and a configuration's prefill replays the layers below its block from them."""
    from poptune.engine.prefix import PrefixStates

    model, tokenizer = shared("tiny-llama")
    requests = _requests(4, 10)
    alone = _both(model, tokenizer, [PopConfig(skip=2)], requests, batch_size=2)[True]
    states = PrefixStates()
    full_answers(model).clear()
    with states.attached(model):
        reused = [score_requests(model, tokenizer, config, requests, list(requests), batch_size=2,
                                 task=LIKELIHOOD).details[ITEMS_KEY]
                  for config in [PopConfig(skip=0), PopConfig(skip=2)]]
    full_answers(model).clear()
    assert states.recorded == len(requests) and states.replayed == len(requests)
    for one, two in zip(reused, alone):
        _same(one, two, 1e-5)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3"])
def test_rows_end_at_their_stop_text_with_the_answers_and_scores_unchanged(shared, monkeypatch, name):
    """A row whose text has reached one of its stop sequences ends there (its answer is cut there anyway): fewer
    decode steps than generating on to the token limit, and every answer and score what that and a cut give."""
    from poptune.engine import greedy
    from poptune.evaluate import answers

    model, tokenizer = shared(name)
    # the tiny models' answers are byte tokens: some rows repeat \x15, which ends them
    requests = {i: PromptRequest(i, r.prompt, None, max_tokens=24, stop=("\x15", "\n"))
                for i, r in _requests(4, 10).items()}
    steps = []
    real = greedy.Steps.push
    monkeypatch.setattr(greedy.Steps, "push", lambda self, tokens: steps.append(1) or real(self, tokens))
    runs = _both(model, tokenizer, [PopConfig(skip=1), PopConfig(skip=2, boundary="window-4")], requests,
                 batch_size=1)
    stopped = len(steps)
    for one, two in zip(runs[True], runs[False]):  # the two-pass way generates to the limit, then cuts
        _same(one, two, 1e-4)
    assert any(row["divergence"] is not None for run in runs[True][1:] for row in run.values())
    monkeypatch.setattr(answers, "_stopping", lambda *args: None)
    steps.clear()
    unstopped = _both(model, tokenizer, [PopConfig(skip=1), PopConfig(skip=2, boundary="window-4")], requests,
                      batch_size=1)
    assert unstopped[True] == runs[True]
    assert stopped < len(steps)
