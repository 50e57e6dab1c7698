"""``generate`` checks its prompt against the model's context before the model loads (issue 87, point 3): a
100,000-character prompt used to run for minutes, 5,001 tokens passed with only transformers' warning."""

from __future__ import annotations

import time

import pytest

from poptune.cli import main
from poptune.models import load_tokenizer, max_positions

GEN = ["generate", "--model", "tiny-llama", "--skip", "1", "--max-new-tokens", "2"]


def _refused(capsys, *argv: str) -> str:
    started = time.monotonic()
    code = main(list(argv))
    _, err = capsys.readouterr()
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert time.monotonic() - started < 10
    return err.strip()


@pytest.mark.parametrize("prompt, extra", [("x" * 100_000, []), ("x" * 5_001, []),
                                           ("x" * 4_090, ["--follow-up", "why"]),
                                           ("x" * 4_094, ["--max-new-tokens", "5"])])
def test_a_prompt_past_the_context_is_refused_before_the_model_loads(capsys, no_model_load, prompt, extra):
    err = _refused(capsys, *GEN, "--prompt", prompt, *extra)
    assert "`--prompt`" in err and "the model tiny-llama holds 4096" in err and "positions" in err


def test_the_demo_is_cut_to_fit_and_a_turn_too_long_for_what_is_left_is_refused(capsys, no_model_load):
    import argparse

    from poptune.cli.generate import prompt_within
    from poptune.measure.timing_prompts import DEMO_QUESTION, demo_prompt

    tokenizer, limit = load_tokenizer("tiny-llama"), max_positions("tiny-llama")
    args = argparse.Namespace(prompt=None, follow_up=[], max_new_tokens=32, model="tiny-llama")
    text = prompt_within(args, tokenizer, limit)
    assert len(tokenizer(demo_prompt())["input_ids"]) > limit  # the whole demo does not fit a tiny model
    assert text.endswith(f"Question: {DEMO_QUESTION}\nAnswer:") and text.startswith("Read the passage")
    assert limit - 200 < len(tokenizer(text)["input_ids"]) + 32 <= limit
    args.max_new_tokens = 5000
    err = _refused(capsys, "generate", "--model", "tiny-llama", "--skip", "1", "--max-new-tokens", "5000")
    assert "the built-in demo's question" in err and "holds 4096" in err
