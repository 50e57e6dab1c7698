"""The command line: output on success, one line and exit code 2 on every user error."""

import json
import re

import pytest

from poptune import load_model
from poptune.cli import main
from poptune.cli.generate import SHORT_NOTE, SHORT_PROMPT
from poptune.measure.timing_prompts import demo_prompt


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _one_line_error(capsys, *argv):
    with pytest.raises(SystemExit) as exc:  # argparse errors exit directly
        main(list(argv))
    out, err = capsys.readouterr()
    return exc.value.code, err


def test_bench_prints_table_and_writes_json(capsys, tmp_path):
    path = tmp_path / "bench.json"
    code, out, _ = _run(
        capsys, "bench", "--model", "tiny-llama", "--skip", "2", "--lengths", "12,24", "--repeats", "3",
        "--min-seconds", "0", "--decode-tokens", "2", "--precision", "0.5", "--max-pairs", "4", "--out", str(path),
    )
    assert code == 0
    assert "speedup [95% CI]" in out and "ideal" in out and "A/A check (full against full at 12)" in out
    assert ("TOO NOISY" in out) != ("null checks passed" in out)
    data = json.loads(path.read_text())
    assert [row["length"] for row in data["rows"]] == [12, 24]
    assert all(3 <= row["pairs"] <= 4 and row["speedup_lo"] <= row["speedup_hi"] for row in data["rows"])
    assert data["policy"]["precision"] == 0.5 and data["policy"]["order"] == "alternate"
    assert data["noisy"] == data["null_check"]["noisy"] and data["provenance"]["command"]
    assert data["hardware"]["hardware_id"].startswith("cpu-")


def test_bench_with_images_reports_image_tokens_per_resolution(capsys, tmp_path):
    path = tmp_path / "bench.json"
    code, out, _ = _run(
        capsys, "bench", "--model", "tiny-qwen3-vl", "--skip", "2", "--image", "64x48,320x240", "--repeats", "2",
        "--min-seconds", "0", "--decode-tokens", "2", "--precision", "0", "--no-null-check", "--out", str(path),
    )
    assert code == 0
    assert "img tok" in out and "320x240" in out and "one image" in out
    data = json.loads(path.read_text())
    assert data["images"] == ["64x48", "320x240"]
    rows = {row["image"]: row for row in data["rows"]}
    assert rows["64x48"]["image_tokens"] == 70 and rows["320x240"]["image_tokens"] == 300  # 16-pixel merged patches
    assert all(row["length"] > row["image_tokens"] and row["speedup"] > 0 for row in rows.values())


def test_bench_in_chunks(capsys, tmp_path):
    path = tmp_path / "bench.json"
    code, out, _ = _run(capsys, "bench", "--model", "tiny-llama", "--skip", "2", "--lengths", "24", "--repeats", "3",
                        "--min-seconds", "0", "--decode-tokens", "0", "--max-pairs", "3", "--no-null-check",
                        "--prefill-chunk", "8", "--out", str(path))
    assert code == 0 and "prefill in chunks of 8 tokens" in out.splitlines()[0]
    assert json.loads(path.read_text())["prefill_chunk"] == 8


def test_generate_prints_both_continuations_and_ttft(capsys):
    code, out, _ = _run(capsys, "generate", "--model", "tiny-qwen3", "--skip", "2", "--prompt", "Hello",
                        "--max-new-tokens", "3")
    assert code == 0
    lines = out.splitlines()
    n = len(load_model("tiny-qwen3")[1]("Hello")["input_ids"])  # BOS included
    assert lines[0] == f"prompt: {n} tokens (your prompt)"
    assert lines[1].startswith("POP [skip=2") and lines[2].startswith("full model: ")
    agree = re.fullmatch(r"the two agree on their first (\d) tokens \(POP generated (\d), the full model (\d), "
                         r"at most 3 each\)", lines[3])
    assert agree and int(agree[1]) <= min(int(agree[2]), int(agree[3])) and max(int(agree[2]), int(agree[3])) <= 3
    assert re.fullmatch(rf"time to first token \({n} prompt tokens, medians of (\d+) interleaved pairs\): "
                        r"POP [\d.]+ ms, "
                        r"full model [\d.]+ ms; speedup [\d.]+x \(median of the \1 per-pair ratios, "
                        r"range [\d.]+-[\d.]+\)", lines[4])
    assert lines[5] == SHORT_NOTE  # a few-token prompt: says why no speedup shows


def test_generate_a_two_turn_conversation_in_chunks(capsys):
    code, out, _ = _run(capsys, "generate", "--model", "tiny-llama", "--skip", "2", "--prompt", "Once upon a time, "
                        "in a land far away,", "--follow-up", "And then?", "--max-new-tokens", "3",
                        "--prefill-chunk", "8")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].endswith("(your prompt, prefilled in chunks of 8 tokens)")
    turn = lines.index("follow-up 1: 'And then?' (11 tokens, prefilled on top of the conversation's cache)")
    assert lines[turn + 1].startswith("POP [skip=2") and lines[turn + 2].startswith("full model: ")
    assert lines[turn + 3].startswith("the two agree on their first ")


def test_generate_follow_up_answers_are_the_models_own(capsys):
    """The full model's second answer is what it generates itself on the two-turn conversation."""
    import torch

    model, tok = load_model("tiny-llama")
    first = tok(["Hello there"], return_tensors="pt")
    with torch.no_grad():
        answer = model.generate(**first, max_new_tokens=3, do_sample=False)
        follow = tok(["\n\nWhy?"], add_special_tokens=False, return_tensors="pt")["input_ids"]
        ids = torch.cat([answer, follow], dim=1)
        second = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=3,
                                do_sample=False)[0, ids.shape[1]:]
    code, out, _ = _run(capsys, "generate", "--model", "tiny-llama", "--skip", "0", "--prompt", "Hello there",
                        "--follow-up", "Why?", "--max-new-tokens", "3")
    assert code == 0
    assert f"full model: {tok.decode(second, skip_special_tokens=True)!r}" in out.split("follow-up 1:")[1]


def test_generate_without_prompt_runs_the_long_demo(capsys):
    code, out, _ = _run(capsys, "generate", "--model", "tiny-llama", "--skip", "3", "--max-new-tokens", "1")
    assert code == 0
    tokens = len(load_model("tiny-llama")[1](demo_prompt())["input_ids"])  # past a tiny model's 4096 positions
    first = out.splitlines()[0]
    assert first.startswith("prompt: ") and first.endswith(" tokens (built-in demo: Pride and Prejudice, chapter 1, "
                                                           "and a question, cut to fit the model's context with 1 new "
                                                           "tokens)")
    assert 3800 < int(first.split()[1]) <= 4095 < tokens
    assert tokens >= SHORT_PROMPT and SHORT_NOTE not in out
    assert re.search(r"^the two agree on their first [01] tokens \(POP generated 1, the full model 1, "
                     r"at most 1 each\)$", out, re.M)


def test_generate_shows_the_full_models_own_greedy_text(capsys):
    import torch

    model, tok = load_model("tiny-llama")
    inputs = tok(["Hello there"], return_tensors="pt")
    with torch.inference_mode():
        ids = model.generate(**inputs, max_new_tokens=4, do_sample=False)[0, inputs["input_ids"].shape[1]:]
    code, out, _ = _run(capsys, "generate", "--model", "tiny-llama", "--skip", "0", "--prompt", "Hello there",
                        "--max-new-tokens", "4")
    assert code == 0
    assert f"full model: {tok.decode(ids, skip_special_tokens=True)!r}" in out.splitlines()
    n = len(ids)
    assert f"the two agree on their first {n} tokens (POP generated {n}, the full model {n}, at most 4 each)" in out


def test_generate_times_prefill_without_autograd(capsys, monkeypatch):
    import torch

    import poptune.measure.prefill as timed

    seen = []
    real = timed.prefill

    def spy(*args, **kwargs):
        seen.append(torch.is_grad_enabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(timed, "prefill", spy)
    code, _, _ = _run(capsys, "generate", "--model", "tiny-llama", "--skip", "2", "--prompt", "Hello",
                      "--max-new-tokens", "1")
    assert code == 0
    assert len(seen) >= 12 and not any(seen)  # warm-up + 5 pairs at least, all without a graph


@pytest.mark.parametrize(
    "argv, message",
    [
        (["bench", "--model", "tiny-llama", "--skip", "1", "--lengths", "12,x"], "comma-separated integers"),
        (["bench", "--model", "tiny-llama", "--skip", "1", "--lengths", "1"], "integers >= 2"),
        (["bench", "--model", "tiny-llama", "--skip", "1", "--batch-size", "0"], "`batch_size`"),
        (["bench", "--model", "tiny-llama", "--skip", "1", "--device", "cuda"], "CUDA was requested"),
        (["bench", "--model", "tiny-llama", "--skip", "1", "--device", "tpu"], "`device` must be"),
        (["bench", "--model", "tiny-llama", "--skip", "9"], "`skip` must be in [0, 5]"),
        (["bench", "--model", "no-such-model", "--skip", "1"], "unknown model 'no-such-model'"),
        (["bench", "--model", "tiny-qwen3-vl", "--skip", "1", "--image", "640x"], "WIDTHxHEIGHT in pixels"),
        (["bench", "--model", "tiny-qwen3-vl", "--skip", "1", "--image", ","], "at least one WIDTHxHEIGHT"),
        (["bench", "--model", "tiny-qwen3-vl", "--skip", "1", "--image", "99999x480"], "[1, 16384]"),
        (["bench", "--model", "tiny-qwen3-vl", "--skip", "1", "--image", "64x48", "--lengths", "12"], "not both"),
        (["bench", "--model", "tiny-llama", "--skip", "1", "--image", "640x480"], "'tiny-llama' is a text-only model"),
        (["bench", "--model", "gemma-3", "--skip", "1", "--image", "640x480"], "text-only model (Gemma3ForCausalLM)"),
        (["generate", "--model", "tiny-llama", "--skip", "1", "--boundary", "mid", "--prompt", "x"], "`boundary`"),
        (["generate", "--model", "tiny-llama", "--skip", "1", "--prompt", "  "], "must not be empty"),
        (["generate", "--model", "tiny-llama", "--skip", "1", "--offset", "-1", "--prompt", "x"], "`offset`"),
        (["generate", "--model", "tiny-llama", "--skip", "1", "--max-new-tokens", "0"], "must be >= 1, got 0"),
        (["generate", "--model", "tiny-llama"], "give --skip"),
        (["generate", "--model", "tiny-llama", "--skip", "9"], "`skip` must be in [0, 5]"),
        (["generate", "--model", "tiny-llama", "--skip", "1", "--follow-up", " "], "`--follow-up` must not be empty"),
        (["generate", "--model", "tiny-llama", "--skip", "1", "--prefill-chunk", "0"], "`prefill_chunk` must be"),
        (["bench", "--model", "tiny-llama", "--skip", "1", "--prefill-chunk", "-4"], "`prefill_chunk` must be"),
        (["bench", "--model", "tiny-qwen3-vl", "--skip", "1", "--image", "64x48", "--prefill-chunk", "8"],
         "text prompts only"),
        (["eval", "--model", "tiny-llama", "--skip", "1", "--prefill-chunk", "0"], "`prefill_chunk` must be"),
    ],
)
def test_user_errors_are_one_line_exit_2(capsys, tmp_path, argv, message):
    code, out, err = _run(capsys, *argv)
    assert code == 2
    assert err.count("\n") == 1 and message in err
    assert out == ""


def test_bench_json_into_missing_folder_is_refused_before_work(capsys, tmp_path):
    code, _, err = _run(capsys, "bench", "--model", "tiny-llama", "--skip", "1", "--out",
                        str(tmp_path / "no" / "x.json"))
    assert code == 2 and "does not exist" in err
    assert not (tmp_path / "no").exists()


def test_argparse_errors_are_one_line_exit_2(capsys):
    code, err = _one_line_error(capsys, "bench", "--skip")
    assert code == 2 and err.count("\n") == 1
    code, err = _one_line_error(capsys, "generate", "--skip", "1", "--max-new-tokens", "many")
    assert code == 2 and "--max-new-tokens" in err and err.count("\n") == 1


def test_version_prints_the_package_metadata(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    out, err = capsys.readouterr()
    assert exc.value.code == 0 and err == ""
    assert out == f"poptune {version('poptune')}\n" and re.fullmatch(r"poptune \d+\.\d+\.\d+\S*\n", out)


def test_version_without_package_metadata_says_so(capsys, monkeypatch):
    import importlib.metadata

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out == "poptune (version unknown: the package is not installed)\n"


@pytest.mark.parametrize("command", ["bench", "eval", "baseline", "pareto"])
def test_old_style_json_path_is_refused_in_one_line_naming_out(capsys, command):
    code, err = _one_line_error(capsys, command, "--json", "result.json")
    assert code == 2 and err.strip().splitlines() == [f"poptune {command}: error: `--json` takes no file (it prints "
                                                      "JSON on stdout): use `--out result.json` to write one"]
