"""POP served by vLLM (poptune's plugin) answers as poptune's engine does, token for token (float32, CPU).

Each family runs one vLLM engine for the module (starting one takes tens of seconds): tiny random Llama, Qwen3 and
Gemma-3 (head size 32, the smallest vLLM's CPU attention takes; Gemma-3's 8-token window, crossed by every prompt),
saved as Hugging Face directories and loaded by both. The prompts are batched in one ``generate`` (several
requests per step, prefill and decode tokens mixed) and chunked prefill is forced (``max_num_batched_tokens`` 32:
a prompt of 130 tokens takes five steps, its boundary in the last).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from poptune.engine import PopConfig, apply_pop
from poptune.errors import ConfigError
from poptune.models import configs
from poptune.serving.vllm_client import VllmEngine

pytestmark = pytest.mark.vllm

NEW_TOKENS = 6
TOLERANCE = 2e-3  # first-token log-probabilities, float32: two implementations' kernels apart
CHUNKED = {"skip_tokenizer_init": True, "enable_chunked_prefill": True, "max_num_batched_tokens": 32,
           "max_num_seqs": 8, "max_model_len": 512}

FAMILIES = {  # name: (tiny config, the configuration served)
    "llama": ("tiny-llama", PopConfig(skip=3, boundary="last")),
    "qwen3": ("tiny-qwen3", PopConfig(skip=2, boundary="window-4", offset=1)),
    "gemma3": ("tiny-gemma3", PopConfig(skip=3, boundary="last")),
}


RECONFIGURED = PopConfig(skip=2, boundary="window-2")


def _prompts() -> list[list[int]]:
    lengths = [40, 70, 5, 130, 17]
    return [[1] + [(7 * i + 13 * j) % 250 + 3 for j in range(n)] for i, n in enumerate(lengths)]


def _save_tiny(name: str, directory: Path) -> Path:
    from transformers import AutoConfig, AutoModelForCausalLM

    spec = dict(configs.tiny_config(name) or {})
    model_type = spec.pop("model_type")
    spec["head_dim"] = 32
    if "query_pre_attn_scalar" in spec:
        spec["query_pre_attn_scalar"] = 32
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **spec), dtype=torch.float32)
    model.save_pretrained(directory)
    return directory


def _engine_answers(directory: Path, config: PopConfig | None, prompts: list[list[int]]) -> list[dict[str, Any]]:
    """poptune's engine: each prompt alone, greedy, and the first token's log-probabilities."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None  # as vLLM's ignore_eos: every answer NEW_TOKENS long
    answers = []
    with torch.inference_mode():
        for ids in prompts:
            inputs = torch.tensor([ids])
            if config is None:
                out = model.generate(inputs, max_new_tokens=NEW_TOKENS, do_sample=False, output_logits=True,
                                     return_dict_in_generate=True, pad_token_id=0)
            else:
                with apply_pop(model, config):
                    out = model.generate(inputs, max_new_tokens=NEW_TOKENS, do_sample=False, output_logits=True,
                                         return_dict_in_generate=True, pad_token_id=0)
            answers.append({"tokens": out.sequences[0, len(ids):].tolist(),
                            "first": torch.log_softmax(out.logits[0][0].float(), -1)})
    return answers


@pytest.fixture(scope="module", params=list(FAMILIES))
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One family: its directory, its configuration, vLLM's answers with the plugin."""
    name, config = FAMILIES[request.param]
    directory = _save_tiny(name, tmp_path_factory.mktemp(request.param))
    with VllmEngine(directory, pop={"pop_config": config.to_dict()}, engine=CHUNKED) as engine:
        answers = engine.generate(_prompts(), max_tokens=NEW_TOKENS, logprobs=5, ignore_eos=True)["answers"]
        with pytest.raises(ConfigError, match="prompt log-probabilities"):
            engine.generate(_prompts()[:1], max_tokens=1, prompt_logprobs=1)
        again = engine.generate(_prompts()[:1], max_tokens=NEW_TOKENS, ignore_eos=True)["answers"]  # still serving
        applied = engine.configure(RECONFIGURED.to_dict())  # the same engine, another configuration, no restart
        other = engine.generate(_prompts(), max_tokens=NEW_TOKENS, logprobs=5, ignore_eos=True)["answers"]
    return {"directory": directory, "config": config, "answers": answers, "again": again, "other": other,
            "applied": applied}


def _agree(vllm: list[dict[str, Any]], engine: list[dict[str, Any]]) -> list[str]:
    """Where vLLM's answers differ from the engine's (tokens, or a first-token log-probability past tolerance)."""
    problems = []
    for i, (v, e) in enumerate(zip(vllm, engine)):
        if v["tokens"] != e["tokens"]:
            problems.append(f"prompt {i}: tokens {v['tokens']} != engine's {e['tokens']}")
        for token, logprob in v["logprobs"][0].items():
            theirs = float(e["first"][int(token)])
            if not math.isclose(logprob, theirs, abs_tol=TOLERANCE):
                problems.append(f"prompt {i}: log p({token}) {logprob:.5f} != engine's {theirs:.5f}")
    return problems


def test_vllm_with_the_plugin_answers_as_the_engine(served: dict[str, Any]) -> None:
    engine = _engine_answers(served["directory"], served["config"], _prompts())
    assert _agree(served["answers"], engine) == []
    assert served["again"][0]["tokens"] == served["answers"][0]["tokens"]  # a refused request changed nothing


def test_an_engine_given_another_configuration_answers_as_the_engine_with_it(served: dict[str, Any]) -> None:
    # and its pruned tokens' K/V came from the K/V rows kept when vLLM packed the weights, not the whole projection
    assert served["applied"] == [f"{RECONFIGURED}; K/V rows kept for 2 of its 2 skipped layers"]
    assert _agree(served["other"], _engine_answers(served["directory"], RECONFIGURED, _prompts())) == []
    assert _agree(served["other"], _engine_answers(served["directory"], served["config"], _prompts())) != []


@pytest.mark.parametrize("swap", ["boundary", "depth"])
def test_a_swapped_configuration_is_caught(served: dict[str, Any], swap: str) -> None:
    """Teeth: the same comparison against the engine with another boundary (or one layer more skipped) fails."""
    config: PopConfig = served["config"]
    other = (PopConfig(skip=config.skip, boundary="none", offset=config.offset) if swap == "boundary"
             else PopConfig(skip=config.skip + 1, boundary=config.boundary, offset=config.offset))
    assert _agree(served["answers"], _engine_answers(served["directory"], other, _prompts())) != []


def test_skip_0_through_the_plugin_is_vllm_without_it(tmp_path: Path) -> None:
    """The plugin at skip 0 changes nothing, and vLLM's full model answers as the engine's full model."""
    directory = _save_tiny("tiny-llama", tmp_path / "llama")
    with VllmEngine(directory, engine=CHUNKED) as plain:
        full = plain.generate(_prompts(), max_tokens=NEW_TOKENS, logprobs=5, ignore_eos=True)["answers"]
    assert _agree(full, _engine_answers(directory, None, _prompts())) == []
    with VllmEngine(directory, pop={"pop_config": {"skip": 0}}, engine=CHUNKED) as zero:
        assert [a["tokens"] for a in zero.generate(_prompts(), max_tokens=NEW_TOKENS, ignore_eos=True)["answers"]] \
            == [a["tokens"] for a in full]


def test_a_configuration_that_does_not_fit_stops_the_start_in_one_line(tmp_path: Path) -> None:
    directory = _save_tiny("tiny-llama", tmp_path / "llama")
    with pytest.raises(ConfigError, match=r"`skip` must be in \[0, 5\]"):
        VllmEngine(directory, pop={"pop_config": {"skip": 9}}, engine=CHUNKED)


@pytest.mark.integration
def test_gemma_3_270m_served_with_pop_answers_as_the_engine() -> None:
    """The embedded Gemma-3-270M, skip 6 of 18: a prompt past its 512-token window and a short one, batched,
    chunked prefill forced (256 tokens a step)."""
    from poptune.measure.timing_prompts import prompt_batch
    from poptune.models import load_tokenizer
    from poptune.models.embedded import embedded_model_dir

    directory = embedded_model_dir()
    tokenizer = load_tokenizer("gemma-3")
    prompts = [prompt_batch(tokenizer, n)["input_ids"][0].tolist() for n in (700, 90)]
    config = PopConfig(skip=6, boundary="last")
    engine = {"enable_chunked_prefill": True, "max_num_batched_tokens": 256, "max_num_seqs": 4,
              "max_model_len": 1024}
    with VllmEngine(directory, pop={"pop_config": config.to_dict()}, engine=engine) as served:
        answers = served.generate(prompts, max_tokens=NEW_TOKENS, logprobs=5, ignore_eos=True)["answers"]
    assert _agree(answers, _engine_answers(directory, config, prompts)) == []
