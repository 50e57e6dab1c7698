"""The side-by-side benchmark on a tiny model (correctness, not speed)."""

import json

import pytest

from poptune import ConfigError, PopConfig, load_model
from poptune.measure import RepeatPolicy
from poptune.measure.bench import BenchResult, BenchSpec, run_bench
from poptune.measure.prompts import prompt_batch

FAST = RepeatPolicy(warmup=0, min_repeats=2, min_seconds=0.0)


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-gemma3")


def test_run_bench_records_every_length_and_round_trips(tiny):
    model, tok = tiny
    labels = []
    result = run_bench(
        model, tok, PopConfig(skip=3), BenchSpec(lengths=(16, 40), decode_tokens=3, policy=FAST),
        model_name="tiny-gemma3", progress=labels.append,
    )
    assert [row.length for row in result.rows] == [16, 40]
    assert labels == ["prefill 16", "decode 16", "prefill 40", "decode 40"]
    for row in result.rows:
        assert row.prefill.a.count == row.prefill.b.count == 2
        assert row.decode is not None and row.decode.a.count == 2
        assert row.ideal > 1.0 and row.speedup > 0
    data = json.loads(result.to_json())
    assert data["hardware"]["kind"] == "cpu" and data["config"] == {"skip": 3, "boundary": "last", "offset": 0}
    assert BenchResult.from_dict(data).to_json() == result.to_json()
    table = result.table()
    assert "speedup" in table and len(table.splitlines()) == 3
    from poptune import get_pop_config

    assert get_pop_config(model) is None  # the model is left plain


def test_prompts_are_real_text_of_exact_length(tiny):
    _, tok = tiny
    batch = prompt_batch(tok, 300, batch_size=3)
    assert batch["input_ids"].shape == (3, 300)
    assert batch["input_ids"][0, 0] == tok.bos_token_id
    assert "truth universally acknowledged" in tok.decode(batch["input_ids"][0])
    assert not (batch["input_ids"][0] == batch["input_ids"][1]).all()  # rows start at other places


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(lengths=()), "at least one"),
        (dict(lengths=(1,)), "integers >= 2"),
        (dict(batch_size=0), "`batch_size`"),
        (dict(decode_tokens=-1), "`decode_tokens`"),
    ],
)
def test_spec_validation(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        BenchSpec(**kwargs)


def test_lengths_beyond_the_model_are_refused(tiny):
    model, tok = tiny
    with pytest.raises(ConfigError, match="exceed this model's 4096 positions"):
        run_bench(model, tok, PopConfig(skip=1), BenchSpec(lengths=(5000,), policy=FAST), model_name="x")
