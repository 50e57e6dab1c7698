"""Shared-trunk scoring gives every configuration exactly what the per-configuration engine gives it."""

from __future__ import annotations

import pytest
import torch

from poptune import PopConfig, apply_pop
from poptune.engine import trunk as trunk_module
from poptune.engine.trunk import SharedTrunk, batch_key
from poptune.errors import ConfigError
from poptune.evaluate.suite import EvalSpec, measure_tasks
from poptune.evaluate.synthetic import kv_recall_items, passkey_items, run_synthetic

from .test_joint import NEEDS_AMX

CONFIGS = [
    PopConfig(skip=3),
    PopConfig(skip=2, boundary="window-4", offset=1),
    PopConfig(skip=1, boundary="none"),
    PopConfig(skip=4, boundary="window-16", offset=1),
    PopConfig(skip=3, boundary="window-8", kv="anchor"),
]


def _items(tok, lengths=(260, 300)):
    return (passkey_items(tok, lengths=lengths, depths=(0.0, 0.5, 1.0), seed=3)
            + kv_recall_items(tok, num_pairs=(4, 8), per_cell=2, seed=3))


def _outputs(model, tok, config, items, *, chunk=None, batch_size=4):
    with apply_pop(model, config):
        records = run_synthetic(model, tok, items, batch_size=batch_size, max_new_tokens=6, prefill_chunk=chunk).records
    return [r["output"] for r in records]


@pytest.mark.parametrize(("name", "chunk"), [
    ("tiny-llama", None), ("tiny-qwen3", None), ("tiny-gemma3", None),
    pytest.param("gemma-3", None, marks=pytest.mark.integration),
    # chunked prefill: the families with and without a sliding window (tiny-gemma3's is 8 tokens), shorter prompts
    ("tiny-llama", 64), ("tiny-gemma3", 64),
])
def test_generation_with_a_shared_trunk_equals_the_engine_answer_for_answer(shared, name, chunk):
    model, tok = shared(name)
    if name == "gemma-3":
        items = _items(tok, (128,))[:4]  # one batch of four
    else:
        items = _items(tok, (260,))[:7] if chunk else _items(tok)
    configs = CONFIGS[:2] if name == "gemma-3" else CONFIGS
    alone = {c: _outputs(model, tok, c, items, chunk=chunk) for c in [PopConfig(skip=0), *configs]}
    trunk = SharedTrunk(configs)
    with trunk.attached(model):
        together = {c: _outputs(model, tok, c, items, chunk=chunk) for c in [PopConfig(skip=0), *configs]}
    batches = -(-len(items) // 4)
    assert trunk.led == batches and trunk.served == batches * len(configs) and trunk.alone == 0
    assert trunk.together == batches  # greedy answers: the configurations' decodes stacked (engine/joint.py)
    assert together == alone
    assert len(trunk) == 0


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3"])
def test_a_shared_trunk_equals_the_engine_in_bfloat16(name):
    # The default dtype on a CPU with AMX (and on CUDA): the trunk's lower layers are the full model's, the stacked
    # decodes the engine's, answer for answer, in bfloat16 too.
    from poptune import load_model

    model, tok = load_model(name, dtype="bfloat16")
    items = _items(tok)
    alone = {c: _outputs(model, tok, c, items) for c in [PopConfig(skip=0), *CONFIGS]}
    trunk = SharedTrunk(CONFIGS)
    with trunk.attached(model):
        together = {c: _outputs(model, tok, c, items) for c in [PopConfig(skip=0), *CONFIGS]}
    assert trunk.alone == 0 and trunk.together == -(-len(items) // 4)
    assert together == alone


@pytest.mark.integration
@NEEDS_AMX
def test_a_stack_of_more_rows_than_a_product_takes_at_a_time_equals_the_engine(monkeypatch):
    """Gemma-3-270M in bfloat16, a study's precision on a CPU with AMX (the suite's default is float32): the full
    model and 4 configurations over a batch of 8 embedded prompts decode as one stack of 40 rows, more than a
    bfloat16 product of the stack takes at a time (``EXACT_ROWS``), and every configuration's answers are its own
    ``generate``'s. With the products taken over all 40 rows at once, 5/window-64/0 answered a kv_recall item of
    this batch wrongly (a near tie, one bfloat16 step apart; which rows round apart depends on their place in the
    product). The CPU's AMX shown as it is (the suite hides it): the head's and the stack's few-row products are
    streamed (poptune.models.head), as in a study."""
    import poptune.device
    from poptune import load_model

    monkeypatch.setattr(poptune.device, "native_bf16", lambda: True)
    from poptune.engine.joint import EXACT_ROWS
    from poptune.evaluate.workload import build_workload

    model, tok = load_model("gemma-3", dtype="bfloat16")
    tasks = ("passkey", "kv_recall")
    work = build_workload(tok, tasks, data_dir=None, cap=44, synthetic_lengths=(512,), max_positions=None, seed=0)
    spec = EvalSpec(tasks=tasks, batch_size=8, fidelity=None, synthetic_lengths=(512,), seed=0).with_samples(
        {t: work.order[t][40:44] for t in tasks})  # one batch of 8: 4 passkey and 4 kv_recall prompts
    configs = [PopConfig(skip=5, boundary="window-64"), PopConfig(skip=4, boundary="window-64"), PopConfig(skip=6),
               PopConfig(skip=6, boundary="window-64")]
    assert 8 * (1 + len(configs)) > EXACT_ROWS
    alone = {c: measure_tasks(model, tok, c, spec).outcomes for c in [PopConfig(skip=0), *configs]}
    trunk = SharedTrunk(configs)
    with trunk.attached(model):
        together = {c: measure_tasks(model, tok, c, spec).outcomes for c in [PopConfig(skip=0), *configs]}
    assert trunk.together == 1 and trunk.alone == 0
    assert together == alone


def _loglikelihoods(model, tok, config, contexts, continuations):
    from poptune.evaluate.scoring import score_continuations

    trunk = trunk_module.attached_trunk(model)
    key = batch_key(contexts, continuations)
    with apply_pop(model, config):
        compute = lambda: score_continuations(model, contexts, continuations, pad_id=tok.pad_token_id)  # noqa: E731 (the trunk calls it only when it must compute)
        return compute() if trunk is None else trunk.run(model, key, compute)


def _requests():
    g = torch.Generator().manual_seed(0)
    contexts = [torch.randint(5, 200, (n,), generator=g).tolist() for n in (40, 64, 64, 33)]
    continuations = [torch.randint(5, 200, (n,), generator=g).tolist() for n in (3, 1, 5, 2)]
    return contexts, continuations


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3"])
def test_likelihoods_with_a_shared_trunk_equal_the_engine(shared, monkeypatch, name):
    """The configurations' prefills replay the layers before their blocks, those layers' K/V copied from the full
    model's cache (lent by its scoring), and every likelihood is the engine's."""
    from poptune.engine.prefix import PrefixStates

    model, tok = shared(name)
    contexts, continuations = _requests()
    alone = {c: _loglikelihoods(model, tok, c, contexts, continuations) for c in [PopConfig(skip=0), *CONFIGS]}
    made = []
    real = PrefixStates.__init__
    monkeypatch.setattr(PrefixStates, "__init__", lambda self, *a, **k: (real(self, *a, **k), made.append(self))[0])
    trunk = SharedTrunk(CONFIGS)
    with trunk.attached(model):
        together = {c: _loglikelihoods(model, tok, c, contexts, continuations) for c in [PopConfig(skip=0), *CONFIGS]}
    assert trunk.led == 1 and trunk.served == len(CONFIGS)
    assert sum(s.copied for s in made) > 0
    for config in alone:
        assert [g for _, g in together[config]] == [g for _, g in alone[config]], config
        assert max(abs(a - b) for (a, _), (b, _) in zip(together[config], alone[config])) <= 1e-4, config


@pytest.mark.parametrize("swap", ["boundary", "kv"])
def test_the_equality_check_catches_a_configuration_computed_as_another(shared, monkeypatch, swap):
    """The check above has teeth: a trunk that computed one configuration with another boundary or K/V source
    (here, by a sabotaged ``apply_pop``) is caught by the same comparison."""
    model, tok = shared("tiny-llama")
    contexts, continuations = _requests()
    config = PopConfig(skip=3, boundary="window-8")
    wrong = PopConfig(skip=3, boundary="last") if swap == "boundary" else PopConfig(3, "window-8", kv="anchor")
    alone = _loglikelihoods(model, tok, config, contexts, continuations)
    monkeypatch.setattr(trunk_module, "apply_pop", lambda m, c: apply_pop(m, wrong if c == config else c))
    trunk = SharedTrunk([config])
    with trunk.attached(model):
        _loglikelihoods(model, tok, PopConfig(skip=0), contexts, continuations)
        together = _loglikelihoods(model, tok, config, contexts, continuations)
    assert trunk.served == 1
    assert max(abs(a - b) for (a, _), (b, _) in zip(together, alone)) > 1e-3


def test_lm_eval_tasks_with_a_shared_trunk_equal_the_engine(shared, eval_data):
    """Multiple-choice likelihoods through lm-eval (PopLM), batched, every item's outcome the same."""
    model, tok = shared("tiny-llama")
    spec = EvalSpec(tasks=("piqa", "arc_easy"), data_dir=eval_data, limit=6, batch_size=4, fidelity=None)
    configs = [PopConfig(skip=2, boundary="window-4"), PopConfig(skip=3, offset=1)]
    alone = {c: measure_tasks(model, tok, c, spec) for c in [PopConfig(skip=0), *configs]}
    trunk = SharedTrunk(configs)
    with trunk.attached(model, keep=True):
        together = {c: measure_tasks(model, tok, c, spec) for c in [PopConfig(skip=0), *configs]}
    assert trunk.led >= 2 and trunk.served == trunk.led * len(configs) and trunk.alone == 0
    for config in alone:
        assert together[config].outcomes == alone[config].outcomes, config


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3"])
def test_peers_lead_one_another_from_the_recorded_states_answer_for_answer(shared, name):
    # A batch of a study's trials: the full model's states recorded once, no full-model pass leads; the first
    # configuration to score a batch scores it for every peer still racing, and a retired peer is not computed.
    from poptune.engine.prefix import PrefixStates

    model, tok = shared(name)
    items = _items(tok)
    configs = CONFIGS[:4]
    alone = {c: _outputs(model, tok, c, items) for c in configs}
    states = PrefixStates(max_bytes=1 << 30)
    trunk = SharedTrunk(configs, peers=True)
    with states.attached(model):
        _outputs(model, tok, PopConfig(skip=0), items)  # the study's full model: records its layer inputs
        recorded, replayed = states.recorded, states.replayed
        with trunk.attached(model):
            trunk.racing(configs[:3])
            together = {c: _outputs(model, tok, c, items) for c in configs}
    batches = -(-len(items) // 4)
    assert trunk.led == batches and trunk.served == batches * 2 and trunk.together == batches
    assert trunk.alone == batches  # the retired peer: computed alone
    assert states.recorded == recorded and states.replayed > replayed  # replayed, nothing recorded again
    assert together == alone
    assert len(trunk) == 0


def test_a_configuration_outside_the_trunk_or_a_batch_no_lead_covered_computes_alone(shared):
    model, tok = shared("tiny-llama")
    items = _items(tok)[:4]
    config = PopConfig(skip=2)
    trunk = SharedTrunk([config])
    with trunk.attached(model):
        out = _outputs(model, tok, config, items)  # no lead yet: computed
        other = _outputs(model, tok, PopConfig(skip=1), items)
    assert trunk.alone == 2 and trunk.led == 0
    assert out == _outputs(model, tok, config, items) and other == _outputs(model, tok, PopConfig(skip=1), items)


def test_bad_trunks_are_refused():
    with pytest.raises(ConfigError, match="skip >= 1"):
        SharedTrunk([PopConfig(skip=0)])
    with pytest.raises(ConfigError, match="distinct"):
        SharedTrunk([PopConfig(skip=2), PopConfig(skip=2)])
    with pytest.raises(ConfigError, match="the trunk's"):
        SharedTrunk([PopConfig(skip=2)], peers=True).racing([PopConfig(skip=3)])
