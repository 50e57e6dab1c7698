"""Configurations decoded as one stacked batch give, token for token, what each one's ``generate`` gives."""

import pytest
import torch
from transformers import StoppingCriteriaList

from poptune import PopConfig, apply_pop
from poptune.engine import joint
from poptune.engine.joint import generate_together
from poptune.engine.segments import generate
from poptune.engine.trunk import Generation, SharedTrunk

from .test_speculate import StopAfter

CONFIGS = [PopConfig(skip=0), PopConfig(skip=3), PopConfig(skip=2, boundary="window-4", offset=1),
           PopConfig(skip=1, boundary="none"), PopConfig(skip=3, boundary="window-8", kv="anchor")]
NEW = 10


def _amx() -> bool:
    from poptune.device import native_bf16

    return native_bf16()


#: Where studies run in bfloat16 on a CPU (AMX): the stacked decode's products are exact there (engine/joint.py).
NEEDS_AMX = pytest.mark.skipif(not _amx(), reason="needs a CPU that multiplies bfloat16 in hardware (AMX): studies "
                               "run in float32 elsewhere")


def _inputs(tok):
    texts = ["a much longer prompt than the other one, " * 6, "short prompt", "a third prompt of middling length " * 2]
    return dict(tok(texts, return_tensors="pt", padding=True))


def _alone(model, inputs, config, *, chunk=None, stopping=None, **kwargs):
    extra = {"stopping_criteria": stopping()} if stopping else {}
    with torch.inference_mode(), apply_pop(model, config):
        return generate(model, inputs, chunk=chunk, do_sample=False, max_new_tokens=NEW, pad_token_id=0, **extra,
                        **kwargs)


def _together(model, inputs, *, chunk=None, stopping=None, **kwargs):
    with torch.inference_mode():
        return generate_together(model, inputs, CONFIGS, chunk=chunk, stopping=stopping, do_sample=False,
                                 max_new_tokens=NEW, pad_token_id=0, **kwargs)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen3", "tiny-gemma3"])
@pytest.mark.parametrize("chunk", [None, 16])
def test_stacked_decode_equals_each_configurations_generate(shared, name, chunk):
    model, tok = shared(name)
    inputs = _inputs(tok)
    together = _together(model, inputs, chunk=chunk)
    for config, out in zip(CONFIGS, together):
        assert torch.equal(out, _alone(model, inputs, config, chunk=chunk)), config


@pytest.mark.parametrize("stack_bytes", [1, 1 << 40])
def test_rows_and_configurations_that_end_apart_stop_as_generate_does(shared, monkeypatch, stack_bytes):
    """EOS and stateful stopping criteria per configuration, rows ending apart, configurations leaving the stack
    as they stop; with one configuration per stack too."""
    model, tok = shared("tiny-llama")
    inputs = _inputs(tok)
    monkeypatch.setattr(joint, "STACK_BYTES", stack_bytes)
    frequent = int(_alone(model, inputs, PopConfig(skip=0))[0, inputs["input_ids"].shape[1] + 2])
    rows, n = inputs["input_ids"].shape
    stopping = lambda: StoppingCriteriaList([StopAfter(frequent, n, rows)])  # noqa: E731 (a fresh criteria list per call: they keep state)
    for kwargs in ({"eos_token_id": frequent}, {"stopping": stopping}):
        together = _together(model, inputs, **kwargs)
        lengths = set()
        for config, out in zip(CONFIGS, together):
            alone = _alone(model, inputs, config, **kwargs)
            assert torch.equal(out, alone), (config, kwargs)
            lengths.add(out.shape[1])
        assert min(lengths) < n + NEW  # some configuration stopped early: the check covers leaving the stack


@pytest.mark.parametrize("per_stack", [2, None])
def test_buffers_kept_from_batch_to_batch_decode_each_batch_as_fresh_ones(shared, monkeypatch, per_stack):
    """A longer batch after a shorter one grows the kept buffers, a shorter one after it takes their front; several
    stacks in one batch (``per_stack`` configurations each) take them in turn. Each batch decodes as each
    configuration's ``generate``."""
    model, tok = shared("tiny-gemma3")
    if per_stack:
        monkeypatch.setattr(joint, "_bytes", lambda cache: 1)
        monkeypatch.setattr(joint, "STACK_BYTES", per_stack)
    buffers = joint.StackBuffers()
    short = dict(tok(["short prompt", "another"], return_tensors="pt", padding=True))
    long = _inputs(tok)
    held = []
    for inputs in (short, long, short):
        together = _together(model, inputs, buffers=buffers)
        for config, out in zip(CONFIGS, together):
            assert torch.equal(out, _alone(model, inputs, config)), config
        held.append(buffers.nbytes())
    assert 0 < held[0] < held[1] == held[2]
    buffers.clear()
    assert buffers.nbytes() == 0


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3"])
@pytest.mark.parametrize("shares", [True, False])
def test_an_unstackable_configuration_steps_beside_the_stack_through_one_lm_head(shared, monkeypatch, name, shares):
    """The anchor K/V source's compact cache cannot be stacked: its rows still step beside the stack, their final
    hidden states through the LM head with the stack's (every configuration's rows in one head call), unless the
    model's logits are more than the head's (then it decodes alone, as before). Both equal ``generate``."""
    model, tok = shared(name)
    inputs = _inputs(tok)
    if not shares:
        monkeypatch.setattr(joint, "_shares_head", lambda model: False)
    assert joint._shares_head(model) is shares
    rows = []
    hook = model.get_output_embeddings().register_forward_hook(lambda module, args, out: rows.append(len(args[0])))
    try:
        together = _together(model, inputs)
    finally:
        hook.remove()
    for config, out in zip(CONFIGS, together):
        assert torch.equal(out, _alone(model, inputs, config)), config
    prompts = inputs["input_ids"].shape[0]
    assert max(rows) == prompts * (len(CONFIGS) if shares else len(CONFIGS) - 1)


def test_logits_that_are_more_than_the_lm_head_are_never_shared(shared, monkeypatch):
    model, _ = shared("tiny-gemma3")
    assert joint._shares_head(model)
    monkeypatch.setattr(model.config, "final_logit_softcapping", 30.0)  # Gemma 2's soft-capping
    assert not joint._shares_head(model)
    monkeypatch.setattr(joint, "_HEAD_ONLY", frozenset())  # an architecture not known to return the head's logits
    monkeypatch.setattr(model.config, "final_logit_softcapping", None)
    assert not joint._shares_head(model)


def test_what_is_not_a_bare_argmax_is_left_to_generate(shared):
    model, tok = shared("tiny-llama")
    inputs = _inputs(tok)
    assert _together(model, inputs, repetition_penalty=1.3) is None
    with torch.inference_mode():
        assert generate_together(model, inputs, CONFIGS, do_sample=True, max_new_tokens=NEW, pad_token_id=0) is None


def test_the_trunk_decodes_its_generations_together_and_the_comparison_has_teeth(shared, monkeypatch):
    """A trunk's generation goes through the stacked decode, and a configuration prefilled as another (a sabotaged
    ``apply_pop`` in the stacked path) is caught by comparing with the engine."""
    model, tok = shared("tiny-llama")
    inputs = _inputs(tok)
    configs = CONFIGS[1:]
    settings = {"do_sample": False, "max_new_tokens": NEW, "pad_token_id": 0}

    def run(config, trunk):
        with torch.inference_mode(), apply_pop(model, config):
            return trunk.run(model, b"batch", lambda: generate(model, inputs, **settings),
                             Generation(inputs, None, None, settings))

    trunk = SharedTrunk(configs)
    with trunk.attached(model):
        outs = {c: run(c, trunk) for c in CONFIGS}
    assert trunk.together == 1 and trunk.served == len(configs)
    assert all(torch.equal(outs[c], _alone(model, inputs, c)) for c in CONFIGS)
    wrong = {configs[0]: PopConfig(skip=3, boundary="none")}
    monkeypatch.setattr(joint, "apply_pop", lambda m, c: apply_pop(m, wrong.get(c, c)))
    trunk = SharedTrunk(configs)
    with trunk.attached(model):
        sabotaged = {c: run(c, trunk) for c in CONFIGS}
    assert not torch.equal(sabotaged[configs[0]], outs[configs[0]])


def _watched(monkeypatch, kind=None):
    """The stacks' :class:`~poptune.engine.repeats.Repeats`, made as ``kind`` (default: the real one)."""
    from poptune.engine.repeats import Repeats

    made = []
    real = (kind or Repeats).of

    def of(*args):
        made.append(real(*args))
        return made[-1]

    monkeypatch.setattr(joint.Repeats, "of", staticmethod(of))
    return made


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen3", "tiny-gemma3"])
@pytest.mark.parametrize("stopping", [False, True])
def test_rows_that_repeat_the_full_models_are_computed_once_below_their_blocks(shared, monkeypatch, name, stopping):
    """Rows whose answer so far is the full model's take its outputs below their blocks, rows that leave it are
    given its K/V there and computed from then on (both happen on the tiny Llama and Gemma-3), and every answer is
    its ``generate``'s; with
    rows and configurations ending apart too (the rows leave every layer's cache)."""
    model, tok = shared(name)
    inputs = _inputs(tok)
    made = _watched(monkeypatch)
    kwargs = {}
    if stopping:
        rows, n = inputs["input_ids"].shape
        frequent = int(_alone(model, inputs, PopConfig(skip=0))[0, n + 2])
        kwargs = {"stopping": lambda: StoppingCriteriaList([StopAfter(frequent, n, rows)]), "eos_token_id": frequent}
    together = _together(model, inputs, **kwargs)
    for config, out in zip(CONFIGS, together):
        assert torch.equal(out, _alone(model, inputs, config, **kwargs)), config
    assert len(made) == 1 and 0 < made[0].skipped < made[0].total
    assert made[0].copied > 0 or name == "tiny-qwen3"  # its repeating rows keep the full model's answers to the end


def test_a_row_that_left_the_full_models_answer_but_is_still_served_its_outputs_is_caught(shared, monkeypatch):
    """The equality above has teeth: rows told that every token is their twin's keep taking its outputs below their
    blocks after their answers part, and answers change."""
    from poptune.engine.repeats import Repeats

    class Blind(Repeats):
        def step(self, last, keep, cache):
            super().step([0] * len(last), keep, cache)

    model, tok = shared("tiny-llama")
    inputs = _inputs(tok)
    right = _together(model, inputs)
    made = _watched(monkeypatch, Blind)
    wrong = _together(model, inputs)
    assert made and made[0].skipped > 0
    assert any(not torch.equal(w, r) for w, r in zip(wrong, right))


def test_a_configuration_that_skips_no_layer_beside_the_full_model_is_stacked_as_it(shared):
    """``PopConfig(skip=0, layers=())`` skips nothing: no block, so no layers below one to repeat."""
    model, tok = shared("tiny-llama")
    inputs = _inputs(tok)
    configs = [PopConfig(skip=0), PopConfig(skip=0, layers=()), PopConfig(skip=3)]
    with torch.inference_mode():
        together = generate_together(model, inputs, configs, do_sample=False, max_new_tokens=NEW, pad_token_id=0)
    for config, out in zip(configs, together):
        assert torch.equal(out, _alone(model, inputs, config)), config


def test_no_row_repeats_where_the_full_model_is_not_stacked(shared, monkeypatch):
    model, tok = shared("tiny-gemma3")
    inputs = _inputs(tok)
    made = _watched(monkeypatch)
    configs = CONFIGS[1:]
    with torch.inference_mode():
        together = generate_together(model, inputs, configs, do_sample=False, max_new_tokens=NEW, pad_token_id=0)
    assert made == [None]
    for config, out in zip(configs, together):
        assert torch.equal(out, _alone(model, inputs, config)), config


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3"])
@pytest.mark.parametrize("chunk", [None, 16])
def test_the_layers_before_the_block_copied_from_the_full_models_cache_change_nothing(shared, name, chunk):
    """With prefix states attached, the configurations replay the full model's layers and copy their K/V from its
    cache (whole prompts only: a chunked prefill recomputes them), token for token what ``generate`` gives."""
    from poptune.engine.prefix import PrefixStates

    model, tok = shared(name)
    inputs = _inputs(tok)
    states = PrefixStates(max_bytes=1 << 40)
    with states.attached(model):
        together = _together(model, inputs, chunk=chunk)
    assert (states.copied > 0) == (chunk is None)
    assert states.replayed > 0 or chunk is not None
    for config, out in zip(CONFIGS, together):
        assert torch.equal(out, _alone(model, inputs, config, chunk=chunk)), config


def test_a_lent_cache_serves_only_the_batch_it_was_made_for(shared):
    from poptune.engine.prefix import PrefixStates

    model, tok = shared("tiny-llama")
    inputs, other = _inputs(tok), dict(tok(["another batch entirely, " * 5, "and its second row"],
                                           return_tensors="pt", padding=True))
    states = PrefixStates(max_bytes=1 << 40)
    with states.attached(model), torch.inference_mode():
        generate_together(model, other, [PopConfig(skip=0)], do_sample=False, max_new_tokens=2, pad_token_id=0)
        _together(model, inputs)  # records `inputs` and lends its cache
        copied = states.copied
        out = _alone(model, other, PopConfig(skip=3))  # replays `other`, recorded before: recomputes its K/V
    assert states.copied == copied and torch.equal(out, _alone(model, other, PopConfig(skip=3)))


def test_lm_eval_generations_through_a_trunk_are_decoded_together_and_equal_the_engine(shared):
    """PopLM's generate_until (lm-eval's stop sequences, stateful) through a shared trunk: the stacked path."""
    from lm_eval.api.instance import Instance

    from poptune.evaluate.lm import PopLM

    model, tok = shared("tiny-gemma3")
    requests = [Instance(request_type="generate_until", doc={}, idx=0,
                         arguments=(ctx, {"until": ["\n\n", "e"], "max_gen_toks": 10, "do_sample": False}))
                for ctx in ("The answer to the question is", "Another, longer context " * 5, "x", "y " * 30)]
    configs = [PopConfig(skip=3, boundary="window-4"), PopConfig(skip=2, offset=1), PopConfig(skip=1, kv="anchor")]
    lms = [PopLM(pretrained=model, tokenizer=tok, skip=0, batch_size=2),
           *(PopLM(pretrained=model, tokenizer=tok, skip=c.skip, boundary=c.boundary, offset=c.offset, kv=c.kv,
                   batch_size=2) for c in configs)]
    alone = [lm.generate_until(requests, disable_tqdm=True) for lm in lms]
    trunk = SharedTrunk(configs)
    with trunk.attached(model):
        together = [lm.generate_until(requests, disable_tqdm=True) for lm in lms]
    assert trunk.led == 2 and trunk.together == 2 and trunk.served == 2 * len(configs)
    assert together == alone


@NEEDS_AMX
def test_the_stacks_bfloat16_products_give_every_row_a_lone_rows_sums():
    """On a CPU with AMX, where studies run in bfloat16: each of Gemma-3-270M's products (the shapes, random values)
    as the stacked decode takes it gives every row of a stack of up to 72 rows exactly what ``F.linear`` gives that
    row alone, and so what a configuration's own decode of a batch of 8 gives it; ``F.linear`` itself does not
    above 32 rows (the comparison has teeth)."""
    from torch.nn import functional as F

    from poptune.engine.joint import EXACT_ROWS, STACK_ROWS, _exact

    g = torch.Generator().manual_seed(0)
    off = 0
    for out_features, in_features in [(256, 640), (640, 1024), (640, 2048), (1024, 640), (2048, 640), (262144, 640)]:
        module = torch.nn.Linear(in_features, out_features, bias=False, dtype=torch.bfloat16)
        module.weight.data = (torch.randn(out_features, in_features, generator=g) * 0.05).to(torch.bfloat16)
        rows = (torch.randn(STACK_ROWS, 1, in_features, generator=g) * 2).to(torch.bfloat16)
        alone = torch.cat([F.linear(rows[i], module.weight) for i in range(STACK_ROWS)])  # (72, out)
        for few in (False, True):  # up to EXACT_ROWS: F.linear itself, or (on an AMX CPU) the streamed product
            exact = _exact(module, module.forward, few=few)
            for m in (1, 2, 8, EXACT_ROWS, EXACT_ROWS + 1, 40, 64, STACK_ROWS):
                assert torch.equal(exact(rows[:m])[:, 0], alone[:m]), (out_features, in_features, m, few)
        off += sum(not torch.equal(a, b) for a, b in zip(F.linear(rows[:, 0], module.weight), alone))
    assert off > 0
