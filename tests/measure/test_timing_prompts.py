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
