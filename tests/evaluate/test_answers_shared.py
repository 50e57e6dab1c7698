"""One prefill for a likelihood item: a configuration's greedy answers and its scores of the full model's answers
from one prefill and one forward over those answers (:func:`poptune.engine.speculate.generate_scored`), and the
full model's score of its own answer from its generation's logits, give what the two passes they replace give:
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
