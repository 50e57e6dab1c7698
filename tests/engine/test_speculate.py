"""Greedy POP generation verified against drafts equals plain greedy generation, whatever the drafts."""

import pytest
import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from poptune import PopConfig, apply_pop
from poptune.engine.prefix import PrefixStates
from poptune.engine.speculate import generate

CONFIGS = [PopConfig(skip=3), PopConfig(skip=2, boundary="window-4", offset=1), PopConfig(skip=1, boundary="none"),
           PopConfig(skip=4, boundary="window-16", offset=1)]
NEW = 12


class StopAfter(StoppingCriteria):
    """Stateful like lm-eval's: a row is done once it has generated ``token``; True when every row is."""

    def __init__(self, token: int, prompt: int, rows: int) -> None:
        self.token, self.prompt, self.done = token, prompt, [False] * rows

    def __call__(self, input_ids, scores, **kwargs) -> bool:
        for b in range(len(self.done)):
            self.done[b] = self.done[b] or bool((input_ids[b, self.prompt:] == self.token).any())
        return all(self.done)


def _prompts(tok, batch: bool):
    texts = ["a much longer prompt than the other one, " * 4, "short prompt"] if batch else ["one prompt " * 9]
    return dict(tok(texts, return_tensors="pt", padding=True))


def _plain(model, inputs, **kwargs):
    with torch.inference_mode():
        return model.generate(**inputs, do_sample=False, max_new_tokens=NEW, pad_token_id=0, **kwargs)


def _speculated(model, inputs, states, stopping=None, **kwargs):
    with torch.inference_mode(), states.attached(model):
        return generate(model, inputs, states=states, stopping=stopping, do_sample=False, max_new_tokens=NEW,
                        pad_token_id=0, **kwargs)


def _with_drafts(inputs, answers):
    """States holding ``answers`` (B, T) as the full model's answers to ``inputs``."""
    states = PrefixStates()
    states.record_drafts(inputs, torch.cat([inputs["input_ids"], answers], dim=-1), eos=set())
    return states


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3"])  # tiny-gemma3: an 8-token sliding window
@pytest.mark.parametrize("batch", [False, True])
def test_equals_plain_greedy_whether_drafts_hold_or_diverge(shared, name, batch):
    model, tok = shared(name)
    inputs = _prompts(tok, batch)
    n = inputs["input_ids"].shape[1]
    for config in CONFIGS:
        with apply_pop(model, config):
            plain = _plain(model, inputs)
            answer = plain[:, n:]
            for cut in (None, 1, 2, 6):  # the whole answer; wrong from token `cut` on
                draft = answer.clone()
                if cut is not None:
                    draft[:, cut:] = (draft[:, cut:] + 7) % 200 + 5
                states = _with_drafts(inputs, draft)
                out = _speculated(model, inputs, states)
                assert torch.equal(out, plain), (config, cut)
                assert states.drafted == inputs["input_ids"].shape[0] and states.fallbacks == 0
                # a whole answer: two rounds (8 tokens, then what is left); else at least its right tokens
                assert states.accepted >= (NEW - 3 if cut is None else cut - 1)


@pytest.mark.parametrize("batch", [False, True])
def test_the_full_model_records_its_answers_and_stops_apply_exactly(shared, batch):
    model, tok = shared("tiny-gemma3")
    inputs = _prompts(tok, batch)
    n = inputs["input_ids"].shape[1]
    states = PrefixStates()
    with apply_pop(model, PopConfig(skip=0)):
        full = _speculated(model, inputs, states)  # records
    assert torch.equal(full, _plain(model, inputs)) and states.drafts(inputs) is not None
    with apply_pop(model, PopConfig(skip=2, boundary="window-4")):
        plain = _plain(model, inputs)
        token = int(plain[0, n + 4])  # a token row 0 generates: the criteria stop there (or later)
        for kwargs in ({}, {"eos_token_id": token}):
            expected = _plain(model, inputs, stopping_criteria=StoppingCriteriaList([StopAfter(token, n, len(plain))]),
                              **kwargs)
            out = _speculated(model, inputs, states,
                              stopping=lambda: StoppingCriteriaList([StopAfter(token, n, len(plain))]), **kwargs)
            assert torch.equal(out, expected), kwargs


def test_a_batch_whose_rows_end_apart_pads_the_ended_row_as_generate_does(shared):
    model, tok = shared("tiny-gemma3")
    inputs = _prompts(tok, True)
    n = inputs["input_ids"].shape[1]
    with apply_pop(model, PopConfig(skip=3)):
        plain = _plain(model, inputs)
        eos = int(plain[0, n + 2])  # row 0 ends at its third token; row 1 (unless it says it too) goes on
        expected = _plain(model, inputs, eos_token_id=eos)
        states = _with_drafts(inputs, plain[:, n : n + 6])  # short drafts: generation goes on after them
        out = _speculated(model, inputs, states, eos_token_id=eos)
    assert (expected[0, n + 3:] == 0).all() and not (expected[1, n + 3:] == 0).all()
    assert torch.equal(out, expected) and states.fallbacks == 0 and states.drafted == 2


def test_sampling_and_missing_drafts_generate_plainly(shared):
    model, tok = shared("tiny-llama")
    inputs = _prompts(tok, False)
    n = inputs["input_ids"].shape[1]
    with apply_pop(model, PopConfig(skip=2)):
        states = _with_drafts(inputs, _plain(model, inputs)[:, n:])
        torch.manual_seed(3)
        sampled = model.generate(**inputs, do_sample=True, max_new_tokens=NEW, pad_token_id=0)
        torch.manual_seed(3)
        with states.attached(model):
            out = generate(model, inputs, states=states, do_sample=True, max_new_tokens=NEW, pad_token_id=0)
        assert torch.equal(out, sampled) and states.fallbacks == 1 and states.drafted == 0
        other = dict(tok(["a prompt never answered"], return_tensors="pt"))
        assert torch.equal(_speculated(model, other, states), _plain(model, other))
        assert states.fallbacks == 1 and states.drafted == 0  # no draft: nothing to fall back from


def test_poplm_generates_the_same_with_drafts(shared):
    from lm_eval.api.instance import Instance

    from poptune.evaluate.lm import PopLM

    model, tok = shared("tiny-gemma3")
    requests = [Instance(request_type="generate_until", doc={}, idx=0,
                         arguments=(ctx, {"until": ["\n\n", "e"], "max_gen_toks": 10, "do_sample": False}))
                for ctx in ("The answer to the question is", "Another, longer context " * 5, "x")]
    full = PopLM(pretrained=model, tokenizer=tok, skip=0, batch_size=2)
    pop = PopLM(pretrained=model, tokenizer=tok, skip=3, boundary="window-4", batch_size=2)
    plain = pop.generate_until(requests, disable_tqdm=True)
    states = PrefixStates()
    with states.attached(model):
        full.generate_until(requests, disable_tqdm=True)
        assert pop.generate_until(requests, disable_tqdm=True) == plain
    assert states.drafted >= 1, (states.drafted, states.fallbacks)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3"])
def test_an_answer_that_rejoins_the_draft_is_found_again_by_lookup(shared, name):
    model, tok = shared(name)
    inputs = _prompts(tok, False)
    n = inputs["input_ids"].shape[1]
    with apply_pop(model, PopConfig(skip=2, boundary="window-4")):
        plain = _plain(model, inputs)
        answer = plain[:, n:]
        draft = torch.cat([answer[:, :1], (answer[:, 1:2] + 7) % 200 + 5, answer[:, 1:]], dim=-1)  # one token too many
        states = _with_drafts(inputs, draft)
        out = _speculated(model, inputs, states)
    assert torch.equal(out, plain)
    # the draft alone is wrong from token 1 on; looked up again after two more tokens, it gives most of the rest
    # (fewer where the random answer repeats an n-gram and the lookup picks its other occurrence)
    assert states.accepted >= 3
