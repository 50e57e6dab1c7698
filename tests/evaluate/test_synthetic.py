"""Synthetic context tasks: generation on the byte-level tiny tokenizer, runs on tiny models, real Gemma-3."""

from __future__ import annotations

import json

import pytest

from poptune import ConfigError, PopConfig, apply_pop, load_model, remove_pop
from poptune.evaluate.synthetic import (
    MAX_PAIRS,
    SyntheticItem,
    SyntheticResult,
    is_correct,
    kv_recall_items,
    passkey_items,
    run_synthetic,
)

# The byte-level tokenizer needs ~250 tokens for the task line, needle and question alone.
LENGTHS = (512, 1024)
DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
NEEDLE = "The pass key is {key}. Remember it. {key} is the pass key."


@pytest.fixture(scope="module")
def tiny_llama():
    model, tokenizer = load_model("tiny-llama")
    yield model, tokenizer
    remove_pop(model)


@pytest.fixture(scope="module")
def tokenizer(tiny_llama):
    return tiny_llama[1]


def _ntokens(tokenizer, text: str) -> int:
    return len(tokenizer(text)["input_ids"])


# ---- passkey generation -----------------------------------------------------------------------------------


def test_passkey_items_are_deterministic_and_seeded(tokenizer) -> None:
    a = passkey_items(tokenizer, lengths=LENGTHS, per_cell=2, seed=3)
    assert a == passkey_items(tokenizer, lengths=LENGTHS, per_cell=2, seed=3)
    b = passkey_items(tokenizer, lengths=LENGTHS, per_cell=2, seed=4)
    assert [i.answer for i in a] != [i.answer for i in b]
    assert len(a) == len(LENGTHS) * len(DEPTHS) * 2
    assert [(i.meta["length"], i.meta["depth"], i.meta["index"]) for i in a] == [
        (length, depth, index) for length in LENGTHS for depth in DEPTHS for index in range(2)
    ]


def test_passkey_prompts_have_the_requested_length(tokenizer) -> None:
    for item in passkey_items(tokenizer, lengths=(300, 512, 1024, 2048), per_cell=1):
        n = _ntokens(tokenizer, item.prompt)
        assert n == item.meta["tokens"]
        # Within half a filler sentence (<= 11 bytes here) of the length asked for.
        assert abs(n - item.meta["length"]) <= max(0.03 * item.meta["length"], 11), item.meta


def test_passkey_appears_only_in_the_needle(tokenizer) -> None:
    for item in passkey_items(tokenizer, lengths=LENGTHS, per_cell=2, seed=7):
        assert item.task == "passkey" and len(item.answer) == 5 and item.answer.isdigit()
        needle = NEEDLE.format(key=item.answer)
        assert item.prompt.count(needle) == 1
        assert item.prompt.count(item.answer) == 2  # both inside the needle
        assert item.prompt.startswith("There is an important info hidden inside a lot of irrelevant text.")
        assert item.prompt.endswith("\nWhat is the pass key? The pass key is")
        assert is_correct(f" {item.answer}. Remember it.", item.answer)


def test_passkey_depth_places_the_needle(tokenizer) -> None:
    depths = (0.0, 0.25, 0.5, 0.75, 1.0)
    items = passkey_items(tokenizer, lengths=(1024,), depths=depths)
    for item, depth in zip(items, depths):
        needle = NEEDLE.format(key=item.answer)
        lines = item.prompt.split("\n")
        # Lines: task, filler before (absent at 0%), needle, filler after (absent at 100%), question.
        assert lines.index(needle) == (1 if depth == 0.0 else 2)
        assert len(lines) == (4 if depth in (0.0, 1.0) else 5)
        before = item.prompt[: item.prompt.index(needle)]
        after = item.prompt[item.prompt.index(needle) + len(needle) :]
        n_before, n_after = before.count(".") - 3, after.count(".")  # the task line has three sentences
        assert n_before + n_after == item.meta["filler_sentences"]
        assert abs(n_before - depth * item.meta["filler_sentences"]) <= 0.5
        assert item.meta["needle_token"] == _ntokens(tokenizer, before)
    first, *_, last = items
    assert first.meta["needle_token"] == _ntokens(tokenizer, first.prompt.split("\n")[0] + "\n")  # near the start
    assert last.meta["tokens"] - last.meta["needle_token"] < 120  # only the needle and the question follow it
    assert [i.meta["needle_token"] for i in items] == sorted(i.meta["needle_token"] for i in items)


def test_passkey_length_too_short_raises(tokenizer) -> None:
    with pytest.raises(ConfigError, match=r"`lengths` must be at least \d+ tokens"):
        passkey_items(tokenizer, lengths=(64,))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(lengths=(0,)), r"`lengths` must be positive, got \[0\]"),
        (dict(lengths=()), "`lengths` must be a non-empty sequence"),
        (dict(lengths=(512.0,)), "`lengths` must hold integers"),
        (dict(depths=(1.5,)), r"`depths` must be fractions in \[0, 1\], got \[1.5\]"),
        (dict(depths=()), "`depths` must be a non-empty sequence"),
        (dict(per_cell=0), r"`per_cell` must be >= 1, got 0"),
        (dict(seed=-1), "`seed` must be >= 0"),
        (dict(digits=0), r"`digits` must be in \[1, 18\]"),
    ],
)
def test_passkey_bad_arguments_raise(tokenizer, kwargs, message) -> None:
    kwargs = {"lengths": (512,), **kwargs}
    with pytest.raises(ConfigError, match=message):
        passkey_items(tokenizer, **kwargs)


# ---- key-value recall generation --------------------------------------------------------------------------


def test_kv_items_are_deterministic_and_seeded(tokenizer) -> None:
    a = kv_recall_items(tokenizer, num_pairs=(4, 16), per_cell=3, seed=1)
    assert a == kv_recall_items(tokenizer, num_pairs=(4, 16), per_cell=3, seed=1)
    b = kv_recall_items(tokenizer, num_pairs=(4, 16), per_cell=3, seed=2)
    assert [i.prompt for i in a] != [i.prompt for i in b]
    assert [i.meta["num_pairs"] for i in a] == [4, 4, 4, 16, 16, 16]


def test_kv_prompt_holds_one_matching_pair(tokenizer) -> None:
    for item in kv_recall_items(tokenizer, num_pairs=(1, 8, 32), per_cell=4, seed=5):
        lines = item.prompt.split("\n")
        pairs = lines[1:-1]
        n, position = item.meta["num_pairs"], item.meta["position"]
        assert len(pairs) == n and 0 <= position < n
        keys = [line.split('"')[1] for line in pairs]
        values = [line.rsplit(" ", 1)[1].rstrip(".") for line in pairs]
        assert len(set(keys)) == n and len(set(values)) == n
        assert values[position] == item.answer
        assert item.prompt.count(item.answer) == 1
        assert lines[-1] == f'What is the value of key "{keys[position]}"? The value of key "{keys[position]}" is'
        assert item.prompt.count(f'"{keys[position]}"') == 3
        assert item.meta["tokens"] == _ntokens(tokenizer, item.prompt)
        assert item.meta["depth"] == (position / (n - 1) if n > 1 else 0.0)


def test_kv_positions_cover_the_list(tokenizer) -> None:
    positions = {i.meta["position"] for i in kv_recall_items(tokenizer, num_pairs=(4,), per_cell=40)}
    assert positions == {0, 1, 2, 3}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(num_pairs=(0,)), r"`num_pairs` must be positive, got \[0\]"),
        (dict(num_pairs=(MAX_PAIRS + 1,)), f"`num_pairs` must be <= {MAX_PAIRS}"),
        (dict(num_pairs=8), "`num_pairs` must be a non-empty sequence"),
        (dict(per_cell=0), "`per_cell` must be >= 1"),
        (dict(num_pairs=(20,), digits=1), "too few distinct values"),
    ],
)
def test_kv_bad_arguments_raise(tokenizer, kwargs, message) -> None:
    with pytest.raises(ConfigError, match=message):
        kv_recall_items(tokenizer, **kwargs)


def test_item_validation() -> None:
    with pytest.raises(ConfigError, match="`answer` must be a string of decimal digits"):
        SyntheticItem("passkey", "prompt", "12a")
    with pytest.raises(ConfigError, match="`prompt` must be a non-empty string"):
        SyntheticItem("passkey", "", "1")


def test_is_correct_takes_the_first_number() -> None:
    assert is_correct(" 12345.\n", "12345")
    assert is_correct(" the 12345 one", "12345")
    assert not is_correct(" 123456", "12345")
    assert not is_correct(" 1 or 12345", "12345")
    assert not is_correct(" the key to the sky", "12345")


# ---- running ----------------------------------------------------------------------------------------------


def _check_result(result: SyntheticResult, items: list[SyntheticItem]) -> None:
    assert isinstance(result, SyntheticResult)
    assert len(result.records) == len(items)
    for record, item in zip(result.records, items):
        assert record["answer"] == item.answer and record["task"] == item.task and record["meta"] == item.meta
        assert isinstance(record["output"], str) and record["correct"] == is_correct(record["output"], item.answer)
    assert set(result.accuracy) == {"passkey", "kv_recall"}
    assert all(0.0 <= a <= 1.0 for a in result.accuracy.values())
    assert set(result.breakdown("passkey")) == {f"length=512 depth={d}" for d in DEPTHS}
    assert set(result.breakdown("kv_recall")) == {"num_pairs=2", "num_pairs=4"}
    data = json.loads(json.dumps(result.to_dict()))
    assert data["num_items"] == len(items) and data["accuracy"] == result.accuracy
    assert data["breakdown"]["kv_recall"] == result.breakdown("kv_recall")


@pytest.mark.parametrize("pop", [None, PopConfig(skip=3), PopConfig(skip=3, boundary="none")], ids=str)
def test_run_synthetic_on_the_tiny_model(tiny_llama, pop) -> None:
    model, tokenizer = tiny_llama
    items = passkey_items(tokenizer, lengths=(512,)) + kv_recall_items(tokenizer, num_pairs=(2, 4), per_cell=1)
    remove_pop(model)
    if pop is not None:
        apply_pop(model, pop)
    result = run_synthetic(model, tokenizer, items, max_new_tokens=4, batch_size=3)
    _check_result(result, items)
    remove_pop(model)


def test_batching_does_not_change_the_outputs(tiny_llama) -> None:
    model, tokenizer = tiny_llama
    items = kv_recall_items(tokenizer, num_pairs=(2, 6), per_cell=2, seed=9)
    one = run_synthetic(model, tokenizer, items, max_new_tokens=4, batch_size=1)
    four = run_synthetic(model, tokenizer, items, max_new_tokens=4, batch_size=4)
    assert [r["output"] for r in one.records] == [r["output"] for r in four.records]


def test_run_synthetic_scores_a_known_answer(tiny_llama, monkeypatch) -> None:
    from poptune.evaluate import synthetic

    model, tokenizer = tiny_llama
    items = kv_recall_items(tokenizer, num_pairs=(2,), per_cell=2)
    answers = {i.prompt: f" {i.answer}." for i in items[:1]}
    monkeypatch.setattr(synthetic, "_generate", lambda m, t, prompts, n, chunk: [answers.get(p, " 0") for p in prompts])
    result = run_synthetic(model, tokenizer, items)
    assert [r["correct"] for r in result.records] == [True, False]
    assert result.accuracy == {"kv_recall": 0.5} and result.breakdown("kv_recall") == {"num_pairs=2": 0.5}


def test_run_synthetic_bad_arguments(tiny_llama) -> None:
    model, tokenizer = tiny_llama
    items = kv_recall_items(tokenizer, num_pairs=(2,), per_cell=1)
    with pytest.raises(ConfigError, match="`max_new_tokens` must be >= 1, got 0"):
        run_synthetic(model, tokenizer, items, max_new_tokens=0)
    with pytest.raises(ConfigError, match="`batch_size` must be >= 1"):
        run_synthetic(model, tokenizer, items, batch_size=0)
    with pytest.raises(ConfigError, match="`items` must be a non-empty sequence"):
        run_synthetic(model, tokenizer, [])
    tokenizer.padding_side = "right"
    try:
        with pytest.raises(ConfigError, match="left-padding tokenizer"):
            run_synthetic(model, tokenizer, items, batch_size=2)
    finally:
        tokenizer.padding_side = "left"


# ---- integration: the real Gemma-3-270M -------------------------------------------------------------------


# Measured (seeds 1 and 2, 4 items per cell): the full model retrieves the passkey at every depth but 100% from
# 256 tokens on (16/20 per length), and recalls 9/10 values among 8 pairs; chance is ~0 for 5-digit numbers.
# The thresholds leave margin for numerical differences across CPUs while still meaning "solves the task".
PASSKEY_MIN = 0.5
KV_MIN = 0.5


@pytest.mark.integration
def test_gemma_retrieves_the_passkey_with_and_without_pop(gemma) -> None:
    model, tokenizer = gemma
    remove_pop(model)
    items = passkey_items(tokenizer, lengths=(256,), per_cell=2, seed=0)
    full = run_synthetic(model, tokenizer, items, batch_size=len(items))
    assert full.accuracy["passkey"] >= PASSKEY_MIN, full.to_dict()
    with apply_pop(model, PopConfig(skip=6, boundary="last")):
        pop = run_synthetic(model, tokenizer, items, batch_size=len(items))
    assert pop.accuracy["passkey"] >= PASSKEY_MIN, pop.to_dict()


@pytest.mark.integration
def test_gemma_recalls_values(gemma) -> None:
    model, tokenizer = gemma
    remove_pop(model)
    items = kv_recall_items(tokenizer, num_pairs=(8,), per_cell=10, seed=0)
    result = run_synthetic(model, tokenizer, items, batch_size=len(items))
    assert result.accuracy["kv_recall"] >= KV_MIN, result.to_dict()
