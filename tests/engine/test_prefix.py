"""Prefix-state reuse equals the plain POP prefill, and refuses to be trusted when it does not."""

import pytest
import torch

from poptune import MeasurementError, PopConfig, apply_pop
from poptune.engine.prefix import PrefixStates, verify

CONFIGS = [PopConfig(skip=3), PopConfig(skip=2, boundary="window-4", offset=1), PopConfig(skip=1, boundary="none"),
           PopConfig(skip=4, boundary="window-16", offset=1)]


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen3", "tiny-gemma3"])
def test_replayed_prefill_equals_the_plain_one(shared, name):
    model, _ = shared(name)
    ids = torch.randint(5, 200, (1, 96), generator=torch.Generator().manual_seed(0))
    states = PrefixStates()
    for config in CONFIGS:
        assert verify(model, ids, config, states) <= 1e-5
    assert states.recorded == 1 and states.replayed == len(CONFIGS)


def test_batched_generation_replays_left_padded_rows_exactly(shared):
    model, tok = shared("tiny-gemma3")
    inputs = tok(["a much longer prompt than the other one, " * 3, "short prompt"], return_tensors="pt", padding=True)
    states = PrefixStates()
    with torch.inference_mode():
        with states.attached(model), apply_pop(model, PopConfig(skip=0)):
            model.generate(**inputs, max_new_tokens=1, do_sample=False)
        with apply_pop(model, PopConfig(skip=3, boundary="window-4")):
            plain = model.generate(**inputs, max_new_tokens=6, do_sample=False, output_scores=True,
                                   return_dict_in_generate=True)
            with states.attached(model):
                replayed = model.generate(**inputs, max_new_tokens=6, do_sample=False, output_scores=True,
                                          return_dict_in_generate=True)
    assert states.replayed == 2
    assert torch.equal(plain.sequences, replayed.sequences)
    assert max(float((a - b).abs().max()) for a, b in zip(plain.scores, replayed.scores)) <= 1e-4


def test_a_wrong_stored_state_is_caught(shared):
    model, _ = shared("tiny-llama")
    ids = torch.randint(5, 200, (1, 64), generator=torch.Generator().manual_seed(1))
    states = PrefixStates()
    verify(model, ids, PopConfig(skip=2), states)
    for key in states._rows:
        states._rows[key] = states._rows[key].clone()
        states._rows[key][2] += 0.5  # the input of layer 2: what layers 0-1 handed on is now wrong
    with pytest.raises(MeasurementError, match="differs from the plain POP prefill"):
        verify(model, ids, PopConfig(skip=2), states)


def test_nothing_is_recorded_beyond_the_byte_cap(shared):
    model, _ = shared("tiny-llama")
    states = PrefixStates(max_bytes=1)
    with states.attached(model), apply_pop(model, PopConfig(skip=0)), torch.inference_mode():
        model(input_ids=torch.randint(5, 200, (1, 32)), logits_to_keep=1)
    assert len(states) == 0 and states.bytes == 0


def test_the_rows_recorded_first_make_room_for_new_ones_at_the_byte_cap(shared):
    """At the cap the oldest rows go, never a row of the batch being recorded: the last batches stay whole and
    replay; an evicted row's prompt runs the plain POP prefill."""
    model, _ = shared("tiny-llama")
    g = torch.Generator().manual_seed(3)
    batches = [torch.randint(5, 200, (2, 24), generator=g) for _ in range(3)]
    row = 24 * model.config.num_hidden_layers * model.config.hidden_size * 4  # (L, T, C) float32
    states = PrefixStates(max_bytes=4 * row)
    with states.attached(model), torch.inference_mode():
        with apply_pop(model, PopConfig(skip=0)):
            for ids in batches:
                model(input_ids=ids, logits_to_keep=1)
        assert states.recorded == 6 and len(states) == 4 and states.bytes == 4 * row
        with apply_pop(model, PopConfig(skip=2)):
            for ids in batches:
                model(input_ids=ids, logits_to_keep=1)
    assert states.replayed == 4  # the last two batches' rows; the first batch's went
    too_small = PrefixStates(max_bytes=row)
    with too_small.attached(model), apply_pop(model, PopConfig(skip=0)), torch.inference_mode():
        model(input_ids=batches[0], logits_to_keep=1)
    assert len(too_small) == 0 and too_small.bytes == 0



def test_a_batch_recorded_whole_keeps_one_copy_and_a_batch_partly_held_copies_its_new_rows(shared):
    """The rows of a batch all new share one copy of its states (one copy a prefill, not two); a batch whose other
    rows were held already keeps its new rows apart (a view would hold the whole batch's states). Both replay."""
    model, _ = shared("tiny-llama")
    g = torch.Generator().manual_seed(5)
    a, b, c = (torch.randint(5, 200, (1, 24), generator=g) for _ in range(3))
    states = PrefixStates()
    with states.attached(model), torch.inference_mode():
        with apply_pop(model, PopConfig(skip=0)):
            model(input_ids=torch.cat([a, b]), logits_to_keep=1)
            model(input_ids=torch.cat([b, c]), logits_to_keep=1)  # b held: c alone is new
        rows = list(states._rows.values())
        assert len(rows) == 3
        assert rows[0].untyped_storage().data_ptr() == rows[1].untyped_storage().data_ptr()
        assert rows[2].untyped_storage().data_ptr() != rows[1].untyped_storage().data_ptr()
        assert rows[2].untyped_storage().nbytes() == rows[2].numel() * rows[2].element_size()
        with apply_pop(model, PopConfig(skip=2)):
            replayed = model(input_ids=torch.cat([c, a]), logits_to_keep=1).logits
            plain = PrefixStates(max_bytes=0)
            with plain.attached(model):
                alone = model(input_ids=torch.cat([c, a]), logits_to_keep=1).logits
    assert states.replayed == 2 and plain.replayed == 0
    assert torch.allclose(replayed, alone, atol=1e-5)


@pytest.mark.integration
def test_replay_on_gemma_3_across_its_sliding_window(gemma):
    model, tok = gemma
    from poptune.measure.timing_prompts import prompt_batch

    ids = prompt_batch(tok, 700, 1)["input_ids"]  # longer than the 512-token sliding window
    states = PrefixStates()
    for config in (PopConfig(skip=6), PopConfig(skip=9, boundary="window-16", offset=1)):
        assert verify(model, ids, config, states) <= 1e-4
