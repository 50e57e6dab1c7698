"""The prompts workload: a user's file read and checked, bad files refused before any model loads, answers
scored against the full model's, and the changed-answers bound's error rate over racing's looks."""

from __future__ import annotations

import json

import numpy as np
import pytest

from poptune.cli import main
from poptune.engine import PopConfig
from poptune.errors import ConfigError
from poptune.evaluate.answers import ITEMS_KEY, full_answers, score_prompts, summary
from poptune.evaluate.changed import changed_interval
from poptune.evaluate.prompts import PROMPTS, check_fit, encode, prompt_record, read_prompts, render
from poptune.evaluate.workload import build_workload, rounds


def _write(tmp_path, name, lines):
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_jsonl_and_txt_files_are_read(tmp_path):
    path = _write(tmp_path, "p.jsonl", [
        json.dumps({"prompt": "What is two plus two?", "answer": "4", "max_tokens": 5}), "",
        json.dumps({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]})])
    first, second = read_prompts(path)
    assert (first.prompt, first.answer, first.max_tokens, first.line) == ("What is two plus two?", "4", 5, 1)
    assert second.messages == (("system", "Be brief."), ("user", "Hi")) and second.line == 3
    txt = read_prompts(_write(tmp_path, "p.txt", ["one prompt", "", "another {not json}"]))
    assert [r.prompt for r in txt] == ["one prompt", "another {not json}"]


BAD = {
    "empty": ("p.jsonl", ["", "  "], "empty"),
    "not json": ("p.jsonl", ['{"prompt": "fine"}', "{prompt: nope"], "line 2 is not JSON"),
    "no prompt": ("p.jsonl", ['{"text": "hello"}'], "needs exactly one of `prompt` or `messages`"),
    "unknown role": ("p.jsonl", ['{"messages": [{"role": "wizard", "content": "hi"}]}'], "unknown role 'wizard'"),
    "bad max_tokens": ("p.jsonl", ['{"prompt": "hi", "max_tokens": 0}'], "`max_tokens` must be an integer"),
    "not an object": ("p.jsonl", ['["hi"]'], "not a JSON object"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_file_is_refused_naming_its_line(tmp_path, case):
    name, lines, message = BAD[case]
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        read_prompts(_write(tmp_path, name, lines))



@pytest.mark.parametrize("command", ["study", "eval", "bench"])
@pytest.mark.parametrize("case", sorted(BAD) + ["too long"])
def test_the_cli_refuses_a_bad_file_in_one_line_with_exit_2_before_loading(tmp_path, capsys, no_model_load,
                                                                          command, case):
    if case == "too long":
        name, lines = "p.txt", ["word " * 1000, "x" * 5000]  # tiny-gemma3: 4096 positions, byte tokens
    else:
        name, lines, _ = BAD[case]
    path = _write(tmp_path, name, lines)
    argv = [command, "--model", "tiny-gemma3", "--prompts", str(path)]
    if command == "study":
        argv += ["--storage", f"sqlite:///{tmp_path / 's.db'}"]
    else:
        argv += ["--skip", "1"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error:" in err, err
    assert not (tmp_path / "s.db").exists()


def test_a_chat_is_rendered_with_the_chat_template_and_keeps_its_bos_once(shared):
    _, tokenizer = shared("tiny-gemma3")
    request = read_prompts_from([{"messages": [{"role": "user", "content": "Hello there"}]}])[0]
    text = render(tokenizer, request)
    assert "Hello there" in text and text.endswith("assistant:")  # byte tokenizer: no template, role lines
    assert encode(tokenizer, request) == list(tokenizer(text, add_special_tokens=False)["input_ids"])


_FILES: list = []


def read_prompts_from(rows, tmp=None):
    import tempfile
    from pathlib import Path

    folder = Path(tempfile.mkdtemp())
    path = folder / "p.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    _FILES.append(path)
    return read_prompts(path)


def test_the_workload_skips_and_counts_prompts_that_do_not_fit(tmp_path, shared):
    _, tokenizer = shared("tiny-gemma3")
    path = _write(tmp_path, "p.jsonl", [json.dumps({"prompt": "short one"}), json.dumps({"prompt": "y" * 300}),
                                        json.dumps({"prompt": "another short", "max_tokens": 4})])
    workload = build_workload(tokenizer, (PROMPTS,), data_dir=None, cap=None, max_positions=100, prompts=str(path))
    assert sorted(workload.order[PROMPTS]) == [0, 2] and workload.skipped[PROMPTS] == 1
    assert all(n < 100 for n in workload.tokens[PROMPTS])
    with pytest.raises(ConfigError, match="every prompt is too long"):
        check_fit(tokenizer, read_prompts(path), 5, path)


def test_answers_are_scored_against_the_full_models(tmp_path, shared):
    model, tokenizer = shared("tiny-llama")
    full_answers(model).clear()
    rows = [{"prompt": f"Request number {i}: tell me about the sea.", "max_tokens": 6} for i in range(4)]
    rows[0]["answer"] = "zzzz-not-in-any-answer"
    path = _write(tmp_path, "p.jsonl", [json.dumps(r) for r in rows])
    full = score_prompts(model, tokenizer, PopConfig(skip=0), str(path), [0, 1, 2, 3], batch_size=2)
    assert full.outcomes[PROMPTS] == [1.0] * 4  # the full model against its own kept answers
    assert len(full_answers(model)) == 4
    pop = score_prompts(model, tokenizer, PopConfig(skip=1), str(path), [0, 1, 2, 3], batch_size=2)
    rows_pop = pop.details[ITEMS_KEY]
    for i in range(4):
        fig = rows_pop[i]
        assert fig["unchanged"] in (0.0, 1.0) and 0 <= fig["agreement"] <= 1
        assert (fig["divergence"] is None) == (fig["unchanged"] == 1.0)
        assert fig["loglik"] is None or fig["loglik"] <= 0
    assert rows_pop[0]["correct"] == 0.0 and "correct" not in rows_pop[1]
    figures = summary(full, pop)
    assert figures["prompts"]["items"] == 4
    assert figures["prompts"]["changed"] == 4 - sum(pop.outcomes[PROMPTS])
    assert figures["reference"]["items"] == 1 and figures["reference"]["drop"]["mean"] == 0.0
    record = prompt_record(tokenizer, str(path), [0, 1], [10, 11], 0)
    assert "sea" not in json.dumps(record) and len(record["hash"]) == 2
    assert "sea" in json.dumps(prompt_record(tokenizer, str(path), [0], [10], 0, store_text=True))


def test_clopper_pearson_matches_the_known_values():
    ci, upper = changed_interval(0, 40), changed_interval(0, 40, one_sided=True)
    assert ci.lo == upper.lo == 0.0 and upper.hi == pytest.approx(1 - 0.05 ** (1 / 40), rel=1e-9)  # rule of three
    ci, upper = changed_interval(3, 30), changed_interval(3, 30, one_sided=True)
    assert ci.lo == pytest.approx(0.02112, abs=1e-4) and ci.hi == pytest.approx(0.26528, abs=1e-4)
    assert ci.point == upper.point == 0.1 and ci.level == upper.level == 0.95 and upper.hi < ci.hi
    assert changed_interval(3, 30, looks=3, one_sided=True).hi > upper.hi
    with pytest.raises(ConfigError):
        changed_interval(5, 4)


def test_the_bound_misses_the_true_share_at_most_5_percent_over_racing_looks():
    """Seeded simulation: prompts changed with a true share p, racing's rounds of 8, 16, 32 items; the bound
    holds at every look at once in at least 95% of races (Bonferroni over the looks), and a bound read at each
    look without the correction does not (the test can fail)."""
    rng = np.random.default_rng(37)
    looks = rounds(8, 32)
    races = 4000
    for p in (0.05, 0.2):
        missed = missed_uncorrected = 0
        for _ in range(races):
            changed = np.cumsum(rng.random(looks[-1]) < p)
            counts = [(int(changed[n - 1]), n) for n in looks]
            missed += any(changed_interval(k, n, looks=len(looks), one_sided=True).hi < p for k, n in counts)
            missed_uncorrected += any(changed_interval(k, n, one_sided=True).hi < p for k, n in counts)
        assert missed / races <= 0.05 + 0.01, (p, missed / races)  # 0.01: 3 standard errors of 4000 races
        if p == 0.2:
            assert missed_uncorrected / races > missed / races  # the looks do cost coverage


def test_a_study_stores_no_prompt_text_unless_asked(tmp_path, capsys):
    """The database's bytes hold the prompts' hashes and lengths, never their words (and do with
    --store-prompts); the report quotes no prompt either."""
    words = ("Zanzibarian", "quokkaphile")
    path = _write(tmp_path, "p.jsonl", [json.dumps({"prompt": f"The {words[0]} ferry timetable, {i}.",
                                                    "max_tokens": 3}) for i in range(3)]
                  + [json.dumps({"messages": [{"role": "user", "content": f"Ask the {words[1]} a question."}],
                                 "max_tokens": 3})])
    for store_text, name in ((False, "private.db"), (True, "stored.db")):
        db = tmp_path / name
        argv = ["study", "--model", "tiny-llama", "--prompts", str(path), "--trials", "1", "--limit", "4",
                "--items", "4", "--certify", "0", "--no-confirm", "--repeats", "1", "--max-pairs", "3",
                "--precision", "0", "--storage", f"sqlite:///{db}"] + (["--store-prompts"] if store_text else [])
        assert main(argv) == 0
        out = capsys.readouterr().out
        data = db.read_bytes()
        found = [w for w in words if w.encode() in data]
        assert found == (list(words) if store_text else []), (name, found)
        assert not any(w in out for w in words)
        assert b'"hash"' in data


def test_batches_keep_a_long_prompt_from_padding_short_ones():
    from poptune.evaluate.answers import BATCH_TOKENS, _batches

    prompts = [[1] * n for n in (10, 3000, 12, 11, 5000, 9)]
    batches = _batches(prompts, 8)
    assert sorted(i for b in batches for i in b) == list(range(6))
    assert batches[0] == [5, 0, 3, 2]  # the short ones together, shortest first
    assert all(len(b) * max(len(prompts[i]) for i in b) <= BATCH_TOKENS or len(b) == 1 for b in batches)
    assert len(_batches([[1] * 5] * 20, 8)) == 3


def test_eval_reports_answers_unchanged_with_their_exact_interval(tmp_path, capsys):
    path = _write(tmp_path, "p.jsonl", [json.dumps({"prompt": "The capital of France is", "answer": "Paris",
                                                    "max_tokens": 4}),
                                        json.dumps({"messages": [{"role": "user", "content": "Say hi"}],
                                                    "max_tokens": 4})])
    assert main(["eval", "--model", "tiny-llama", "--skip", "1", "--prompts", str(path)]) == 0
    out = capsys.readouterr().out
    assert "answers unchanged" in out and "exact Clopper-Pearson 95%" in out and "references (1 prompts)" in out
    assert "null reference (the full model again: each prompt alone" in out  # the noise floor beside POP's
    assert "France" not in out and "Say hi" not in out


def test_a_small_prompts_file_is_halved_between_search_and_certification():
    from poptune.problem.presets import prompts_split

    assert prompts_split(34, 32, 128) == (17, 17)  # the example file: as many fresh prompts as searched
    assert prompts_split(1000, 32, 128) == (32, 128)  # a file with room for both keeps both
    assert prompts_split(40, 16, 0) == (16, 0)  # no certification: nothing to keep fresh
    assert prompts_split(1, 32, 128) == (1, 0)


def test_a_prompts_study_shows_answers_unchanged_with_their_exact_interval_and_the_references(tmp_path, capsys):
    """The front's and the reference rows' accuracy column is the answers unchanged out of the prompts scored,
    with the exact interval; the references' drop is reported; a small file is halved (no --limit given)."""
    import optuna

    from poptune.store import StoredStudy

    lines = [json.dumps({"prompt": f"Item {i}: the colour of the sky is", "answer": "blue", "max_tokens": 3})
             for i in range(6)] + [json.dumps({"prompt": f"Count to {i}:", "max_tokens": 3}) for i in range(6)]
    path = _write(tmp_path, "p.jsonl", lines)
    db = tmp_path / "s.db"
    argv = ["study", "--model", "tiny-llama", "--prompts", str(path), "--trials", "2", "--items", "4",
            "--no-confirm", "--repeats", "1", "--max-pairs", "3", "--precision", "0", "--max-drop", "100",
            "--storage", f"sqlite:///{db}"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    stored = StoredStudy.of(optuna.load_study(study_name=optuna.get_all_study_names(f"sqlite:///{db}")[0],
                                              storage=f"sqlite:///{db}"))
    assert (stored.problem["limit"], stored.problem["certify_limit"]) == (6, 6)
    assert "unchanged [exact 95% CI]" in out and "100% (reference)" in out
    assert "up to 6 searched, 6 more kept fresh to certify" in out
    import re

    paper = next(line for line in out.splitlines() if "paper's rule:" in line)
    kept, n, share, lo, hi = re.search(r"(\d+)/(\d+) = ([\d.]+)% \[([\d.]+), ([\d.]+)\]", paper).groups()
    ci = changed_interval(int(n) - int(kept), int(n), looks=2)  # racing 4 -> 6: two planned looks
    assert (float(lo), float(hi)) == (round(100 * (1 - ci.hi), 1), round(100 * (1 - ci.lo), 1))
    assert "references (" in out and "full model: references held by" in out
    assert stored.prompts_null["items"] == 6 and "  null reference (the full model again" in out
    assert "sky" not in out and "Count to" not in out


@pytest.mark.parametrize("case", ["no answer in the file", "no prompts file"])
def test_judging_references_without_any_is_refused_in_one_line_before_loading(tmp_path, capsys, no_model_load,
                                                                             case):
    path = _write(tmp_path, "p.jsonl", [json.dumps({"prompt": "Hello"}), json.dumps({"prompt": "Bye"})])
    argv = ["study", "--model", "tiny-gemma3", "--judge", "references", "--storage", f"sqlite:///{tmp_path / 's.db'}"]
    argv += ["--prompts", str(path)] if case == "no answer in the file" else []
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--judge" in err, err
    assert not (tmp_path / "s.db").exists()


def test_the_references_task_takes_only_the_requests_with_an_answer(tmp_path, shared):
    from poptune.evaluate.prompts import REFERENCES

    _, tokenizer = shared("tiny-gemma3")
    path = _write(tmp_path, "p.jsonl", [json.dumps({"prompt": "one", "answer": "1"}), json.dumps({"prompt": "two"}),
                                        json.dumps({"prompt": "three", "answer": "3"})])
    workload = build_workload(tokenizer, (REFERENCES,), data_dir=None, cap=None, max_positions=None,
                              prompts=str(path))
    assert sorted(workload.order[REFERENCES]) == [0, 2]


def test_a_study_judged_on_references_bounds_their_paired_drop(tmp_path, capsys):
    """``--judge references``: the items are the requests with an answer, each configuration's outcome (the full
    model's too) whether its answer contains the reference; the answers-unchanged figures are still reported."""
    import optuna

    from poptune.evaluate.prompts import REFERENCES
    from poptune.store import StoredStudy

    lines = [json.dumps({"prompt": f"Item {i}: the colour of the sky is", "answer": "blue", "max_tokens": 3})
             for i in range(6)] + [json.dumps({"prompt": f"Count to {i}:", "max_tokens": 3}) for i in range(4)]
    path = _write(tmp_path, "p.jsonl", lines)
    storage = f"sqlite:///{tmp_path / 's.db'}"
    argv = ["study", "--model", "tiny-llama", "--prompts", str(path), "--judge", "references", "--trials", "2",
            "--items", "2", "--no-confirm", "--repeats", "1", "--max-pairs", "3", "--precision", "0",
            "--max-drop", "100", "--storage", storage]
    assert main(argv) == 0
    out = capsys.readouterr().out
    stored = StoredStudy.of(optuna.load_study(study_name=optuna.get_all_study_names(storage)[0], storage=storage))
    assert tuple(stored.problem["tasks"]) == (REFERENCES,)
    assert (stored.problem["limit"], stored.problem["certify_limit"]) == (3, 3)  # 6 with a reference, halved
    assert set(stored.prompts["index"]) <= set(range(6))  # only requests with an answer are items
    assert "accuracy = share of answers containing their reference" in out
    header = next(line for line in out.splitlines() if line.startswith("trial  configuration"))
    assert " accuracy " in header and "unchanged [exact 95% CI]" not in out
    assert "sky" not in out


def test_calibrated_maps_of_a_prompts_study_fit_on_requests_it_never_scores(tmp_path, shared):
    """Maps are fitted on the file's spare requests (neither searched nor certified); a file with none spare gives
    none (the study then fits on WikiText-2 or sampled text)."""
    from poptune.evaluate.workload import calibration_prompts

    _, tokenizer = shared("tiny-gemma3")
    path = _write(tmp_path, "p.jsonl", [json.dumps({"prompt": f"request number {i}"}) for i in range(10)])
    workload = build_workload(tokenizer, (PROMPTS,), data_dir=None, cap=6, max_positions=None, prompts=str(path))
    spare, source = calibration_prompts(tokenizer, workload, data_dir=None, count=32, max_tokens=2048,
                                        prompts_file=str(path))
    scored = {f"request number {i}" for i in workload.order[PROMPTS]}
    assert len(spare) == 4 and not scored & set(spare) and "4 requests of the file" in source
    full = build_workload(tokenizer, (PROMPTS,), data_dir=None, cap=None, max_positions=None, prompts=str(path))
    assert calibration_prompts(tokenizer, full, data_dir=None, count=32, max_tokens=2048,
                               prompts_file=str(path))[0] == []
