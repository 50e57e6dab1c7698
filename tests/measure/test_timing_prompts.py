"""Prompts for timing and for the demo: real text of known length."""

import pytest

from poptune.measure.timing_prompts import DEMO_QUESTION, demo_prompt


def test_demo_prompt_is_a_passage_then_the_question():
    text = demo_prompt()
    assert text.startswith("Read the passage") and text.endswith(f"Question: {DEMO_QUESTION}\nAnswer:")
    # the passage holds the answer, and the whole first chapter (its last sentence included)
    assert "Netherfield is taken by a young man of large fortune" in text and "four or five thousand a year" in text
    assert "its solace was visiting and news." in text
    assert demo_prompt() == text


@pytest.mark.integration
def test_demo_prompt_is_700_to_1200_gemma_tokens(gemma):
    _, tok = gemma
    assert 700 <= len(tok(demo_prompt())["input_ids"]) <= 1200


def test_a_batch_of_more_rows_than_the_text_has_tokens_is_still_rectangular():
    """Issue 87: ``bench --lengths 16 --batch-size 5000`` was ``expected sequence of length 16 (got 15)``: a row's
    start ran past the text's end. Rows start round the text again, each its full length of real tokens."""
    from poptune.measure.timing_prompts import _TEXT, prompt_batch
    from poptune.models import load_tokenizer

    tok = load_tokenizer("tiny-llama")
    tokens = len(tok(_TEXT, add_special_tokens=False)["input_ids"])
    batch = prompt_batch(tok, 16, tokens * 3 + 7)["input_ids"]
    assert tuple(batch.shape) == (tokens * 3 + 7, 16)
    assert batch[1].tolist() != batch[2].tolist() and batch[0].tolist() == batch[tokens].tolist()  # wrapped round
