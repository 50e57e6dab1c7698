"""The command line: output on success, one line and exit code 2 on every user error."""

import json

import pytest

from poptune.cli import main


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
        "--min-seconds", "0", "--decode-tokens", "2", "--precision", "0.5", "--max-pairs", "4", "--json", str(path),
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
        "--min-seconds", "0", "--decode-tokens", "2", "--precision", "0", "--no-null-check", "--json", str(path),
    )
    assert code == 0
    assert "img tok" in out and "320x240" in out and "one image" in out
    data = json.loads(path.read_text())
    assert data["images"] == ["64x48", "320x240"]
    rows = {row["image"]: row for row in data["rows"]}
    assert rows["64x48"]["image_tokens"] == 70 and rows["320x240"]["image_tokens"] == 300  # 16-pixel merged patches
    assert all(row["length"] > row["image_tokens"] and row["speedup"] > 0 for row in rows.values())


def test_generate_prints_text_and_ttft(capsys):
    code, out, _ = _run(capsys, "generate", "--model", "tiny-qwen3", "--skip", "2", "--prompt", "Hello", "--max-new-tokens", "3")
    assert code == 0
    assert "time to first token" in out and "full model" in out


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
    ],
)
def test_user_errors_are_one_line_exit_2(capsys, tmp_path, argv, message):
    code, out, err = _run(capsys, *argv)
    assert code == 2
    assert err.count("\n") == 1 and message in err
    assert out == ""


def test_bench_json_into_missing_folder_is_refused_before_work(capsys, tmp_path):
    code, _, err = _run(capsys, "bench", "--model", "tiny-llama", "--skip", "1", "--json", str(tmp_path / "no" / "x.json"))
    assert code == 2 and "does not exist" in err
    assert not (tmp_path / "no").exists()


def test_argparse_errors_are_one_line_exit_2(capsys):
    code, err = _one_line_error(capsys, "bench", "--skip")
    assert code == 2 and err.count("\n") == 1
    code, err = _one_line_error(capsys, "generate", "--skip", "1")
    assert code == 2 and "--prompt" in err and err.count("\n") == 1
