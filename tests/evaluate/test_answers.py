"""``--judge likelihood``: each prompt's outcome is the mean probability of the full answer's tokens under a
configuration's prefill, in [0, 1] and paired one for one with the full model's, so the paired drop and its
interval apply unchanged; the full model against itself drops by exactly 0; bad combinations are refused."""

from __future__ import annotations

import json
import math

import pytest

from poptune.cli import main
from poptune.engine import PopConfig
from poptune.errors import ConfigError
from poptune.evaluate.answers import ITEMS_KEY, full_answers, outcome, score_prompts
from poptune.evaluate.prompts import JUDGES, LIKELIHOOD, PROMPT_TASKS
from poptune.evaluate.suite import LOWER_IS_BETTER, PRIMARY_METRIC, TaskRun, drop_of


def _write(tmp_path, rows):
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _run(found) -> TaskRun:
    return TaskRun(found.scores, found.items, found.outcomes, found.details)


def test_the_likelihood_task_is_a_judge_with_a_higher_is_better_metric():
    assert JUDGES["likelihood"] == LIKELIHOOD and LIKELIHOOD in PROMPT_TASKS
    assert PRIMARY_METRIC[LIKELIHOOD] == "answer_prob" and "answer_prob" not in LOWER_IS_BETTER


def test_likelihood_outcomes_lie_in_0_1_and_pair_one_for_one(tmp_path, shared):
    model, tokenizer = shared("tiny-llama")
    full_answers(model).clear()
    path = _write(tmp_path, [{"prompt": f"Request {i}: tell me about the sea.", "max_tokens": 5} for i in range(5)])
    items = [3, 0, 4, 1, 2]
    full = score_prompts(model, tokenizer, PopConfig(skip=0), str(path), items, batch_size=2, task=LIKELIHOOD)
    pop = score_prompts(model, tokenizer, PopConfig(skip=1), str(path), items, batch_size=2, task=LIKELIHOOD)
    for run in (full, pop):
        assert run.items == {LIKELIHOOD: items} and len(run.outcomes[LIKELIHOOD]) == len(items)
        assert all(0.0 <= v <= 1.0 for v in run.outcomes[LIKELIHOOD])
        rows = run.details[ITEMS_KEY]
        assert run.outcomes[LIKELIHOOD] == [outcome(rows[i], LIKELIHOOD) for i in items]
        for i in items:
            if rows[i]["prob"] is not None:  # the mean of probabilities is at least exp(mean log-probability)
                assert rows[i]["prob"] >= math.exp(rows[i]["loglik"]) - 1e-9
        assert run.scores[LIKELIHOOD]["answer_prob"] == pytest.approx(sum(run.outcomes[LIKELIHOOD]) / len(items))
    drop = drop_of(_run(full), _run(pop))
    assert drop.items == {LIKELIHOOD: len(items)} and drop.lo <= drop.mean <= drop.hi
    assert -100.0 <= drop.lo and drop.hi <= 100.0
    again = score_prompts(model, tokenizer, PopConfig(skip=0), str(path), items, batch_size=2, task=LIKELIHOOD)
    itself = drop_of(_run(full), _run(again))
    assert itself.mean == 0.0 and itself.flipped == {LIKELIHOOD: 0}  # the same computation: no difference at all


def test_an_empty_full_answer_is_judged_on_whether_it_stayed_empty():
    row = {"unchanged": 0.0, "prob": None, "correct": 1.0}
    assert outcome(row, LIKELIHOOD) == 0.0 and outcome({**row, "prob": 0.25}, LIKELIHOOD) == 0.25


def test_eval_of_the_full_model_under_the_likelihood_judge_drops_exactly_0(tmp_path, capsys):
    path = _write(tmp_path, [{"prompt": f"Count to {i}:", "max_tokens": 4} for i in range(3)])
    out_file = tmp_path / "e.json"
    assert main(["eval", "--model", "tiny-llama", "--skip", "0", "--prompts", str(path), "--judge", "likelihood",
                 "--out", str(out_file)]) == 0
    out = capsys.readouterr().out
    assert "prompt_likelihood" in out and "answer_prob" in out and "null reference" in out
    data = json.loads(out_file.read_text())
    assert data["drop"]["mean"] == 0.0 and data["task_drops"][LIKELIHOOD]["mean"] == 0.0
    assert data["prompts_null"]["items"] == 3 and data["prompts_null"]["batch_size"] == 1



@pytest.mark.parametrize("command", ["study", "eval"])
@pytest.mark.parametrize("case", ["a multiple-choice task", "with --tasks"])
def test_bad_combinations_with_the_likelihood_judge_are_refused_in_one_line(tmp_path, capsys, no_model_load,
                                                                           eval_data, command, case):
    path = _write(tmp_path, [{"prompt": "Hello"}])
    argv = [command, "--model", "tiny-gemma3", "--judge", "likelihood"]
    argv += ["--storage", f"sqlite:///{tmp_path / 's.db'}"] if command == "study" else ["--skip", "1"]
    # without a prompts file the judge takes the tasks' items (tests/evaluate/test_judges.py): not a multiple
    # choice's, which has no answer to generate
    argv += ["--prompts", str(path), "--tasks", "embedded"] if case == "with --tasks" else \
        ["--tasks", "piqa", "--data-dir", str(eval_data)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error:" in err and ("--judge" in err or "--tasks" in err), err
    assert not (tmp_path / "s.db").exists()


def test_a_problem_judges_a_prompts_file_one_way_at_a_time(tmp_path):
    from poptune.evaluate.prompts import PROMPTS
    from poptune.problem.problem import TuningProblem

    path = _write(tmp_path, [{"prompt": "Hello"}])
    with pytest.raises(ConfigError, match="judged one way at a time"):
        TuningProblem(model="tiny-llama", tasks=(PROMPTS, LIKELIHOOD), prompts=str(path))
