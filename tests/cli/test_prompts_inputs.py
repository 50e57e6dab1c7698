"""A prompts file under hostile input (issue 49): its own workload whatever the data directory, read once per
run, compared by content on resume, split only at newlines, and every malformed request refused in one line."""

from __future__ import annotations

import json

import optuna
import pytest

from poptune.cli import build_parser
from poptune.cli._args import problem
from poptune.errors import ConfigError
from poptune.evaluate.prompts import prompts_sha256, read_prompts
from poptune.tune.resume import check_problem
from tests.hostile import refused

optuna.logging.set_verbosity(optuna.logging.WARNING)

STUDY = ["study", "--model", "tiny-llama", "--weights", "random", "--limit", "4", "--certify", "0"]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _prompts(tmp_path, name="p.jsonl", n=4):
    return _jsonl(tmp_path / name, [{"prompt": f"Question {i}: what is {i} plus {i}?", "answer": str(2 * i)}
                                    for i in range(1, n + 1)])


def _problem(*argv):
    return problem(build_parser().parse_args([*STUDY, *argv]))


def _refused(capsys, *argv) -> str:
    return refused(capsys, *argv)


@pytest.mark.parametrize("how", ["option", "environment"])
def test_prompts_are_their_own_workload_whatever_the_data_directory(tmp_path, monkeypatch, eval_data, how):
    path = _prompts(tmp_path)
    if how == "environment":
        monkeypatch.setenv("POPTUNE_DATA", str(eval_data))
        made = _problem("--prompts", str(path))
    else:
        made = _problem("--prompts", str(path), "--data-dir", str(eval_data))
    assert made.tasks == ("prompts",) and made.prompts == str(path.resolve())
    assert made.prompts_sha256 == prompts_sha256(path)


def test_a_resumed_study_compares_the_prompts_content_not_the_path(tmp_path):
    path = _prompts(tmp_path)
    study = optuna.create_study(directions=["minimize", "maximize"])
    study.set_user_attr("problem", _problem("--prompts", str(path)).to_dict())
    moved = tmp_path / "moved.jsonl"
    moved.write_bytes(path.read_bytes())
    check_problem(study, _problem("--prompts", str(moved)))  # the same prompts elsewhere: resumes
    _jsonl(path, [{"prompt": "Something else entirely", "answer": "x"}] * 1 + [{"prompt": f"q{i}"} for i in range(3)])
    with pytest.raises(ConfigError, match="made on other prompts: .*p.jsonl holds other content"):
        check_problem(study, _problem("--prompts", str(path)))


def test_a_study_stored_before_content_hashes_resumes_on_its_path(tmp_path):
    path = _prompts(tmp_path)
    old = dict(_problem("--prompts", str(path)).to_dict())
    old.pop("prompts_sha256")
    study = optuna.create_study(directions=["minimize", "maximize"])
    study.set_user_attr("problem", old)
    check_problem(study, _problem("--prompts", str(path)))


def test_the_prompts_file_is_read_once_per_run(tmp_path):
    path = _prompts(tmp_path)
    first = read_prompts(path)
    path.unlink()  # deleted mid-run: the run goes on with what it read
    assert read_prompts(path) == first
    _jsonl(path, [{"prompt": "a new file at the same path"}])
    assert len(read_prompts(path)) == 1  # a new run (or a changed file) reads it again


@pytest.mark.parametrize("separator", ["\u2028", "\u0085", "\x0c", "\u2029", "\x1c", "\r"])
def test_jsonl_and_txt_split_only_at_newlines(tmp_path, separator):
    text = f"first{separator}still the first"
    raw = tmp_path / "raw.jsonl"  # U+2028 and U+0085 as themselves inside the JSON string (control characters
    # are escaped by JSON); lines end with \r\n, then \n
    raw.write_text(json.dumps({"prompt": text}, ensure_ascii=False) + "\r\n" + json.dumps({"prompt": "second"}) + "\n",
                   encoding="utf-8")
    assert [r.prompt for r in read_prompts(raw)] == [text, "second"]
    txt = tmp_path / "p.txt"
    txt.write_text(f"{text}\r\nsecond\n", encoding="utf-8", newline="")
    assert [r.prompt for r in read_prompts(txt)] == [text, "second"]


def test_a_byte_order_mark_is_not_part_of_the_first_prompt(tmp_path):
    txt = tmp_path / "p.txt"
    txt.write_bytes("\ufeffhello\nworld\n".encode("utf-8"))
    assert [r.prompt for r in read_prompts(txt)] == ["hello", "world"]
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_bytes(b"\xef\xbb\xbf" + json.dumps({"prompt": "hello"}).encode() + b"\n")
    assert [r.prompt for r in read_prompts(jsonl)] == ["hello"]


@pytest.mark.parametrize("rows, message", [
    ([{"messages": [{"role": "user", "content": ""}]}], "message 0 has an empty `content`"),
    ([{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "  "}]}],
     "message 1 has an empty `content`"),
    ([{"prompt": "a", "answer": ""}, {"prompt": "b", "answer": ""}], "`answer` must be non-empty text"),
    ([{"prompt": "same"}, {"prompt": "other"}, {"prompt": "same"}], "line 3 repeats line 1"),
])
def test_malformed_requests_are_refused_in_one_line(tmp_path, rows, message):
    with pytest.raises(ConfigError, match=message):
        read_prompts(_jsonl(tmp_path / "p.jsonl", rows))


def test_duplicate_txt_prompts_are_refused(tmp_path):
    txt = tmp_path / "p.txt"
    txt.write_text("one\ntwo\none\n")
    with pytest.raises(ConfigError, match="line 3 repeats line 1"):
        read_prompts(txt)


def test_store_prompts_without_prompts_is_refused(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    line = _refused(capsys, "study", "--model", "tiny-llama", "--tasks", "passkey", "--lengths", "300",
                    "--store-prompts", "--storage", f"sqlite:///{tmp_path}/s.db")
    assert "`--store-prompts` goes with `--prompts FILE`" in line
    assert not (tmp_path / "s.db").exists()


def test_a_prompts_fifo_is_refused_without_reading_it(capsys, tmp_path, monkeypatch):
    import os

    monkeypatch.chdir(tmp_path)
    os.mkfifo(tmp_path / "p.jsonl")
    line = _refused(capsys, *STUDY, "--prompts", str(tmp_path / "p.jsonl"))
    assert "is not a file" in line
