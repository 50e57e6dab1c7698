"""``--judge likelihood`` on a task pack (issue 56, item 5): a generation task's items read as prompt requests
and scored as a user's prompts are under the likelihood judge -- the same outcome as the prompts-file path on
the same prompts; bad combinations refused in one line; every budget and verdict line says it is a likelihood's,
never accuracy's."""

from __future__ import annotations

import json
import re

import pytest

from poptune.cli import main
from poptune.engine import PopConfig
from poptune.errors import ConfigError
from poptune.evaluate.answers import _cut, full_answers, score_prompts
from poptune.evaluate.judges import (
    LIKELIHOOD_JUDGE,
    LIKELIHOOD_TASKS,
    base_task,
    judge_of,
    judged_tasks,
    likelihood_task,
)
from poptune.evaluate.prompts import LIKELIHOOD
from poptune.evaluate.suite import LOWER_IS_BETTER, PRIMARY_METRIC, EvalSpec, measure_tasks
from poptune.evaluate.workload import build_workload, task_requests

COQA = likelihood_task("longctx_coqa")  # the fixture's CoQA prompts (~1,000 bytes) fit tiny-llama's context


def test_the_judgeable_tasks_are_those_that_generate_an_answer():
    assert set(LIKELIHOOD_TASKS.values()) == {"longctx_squad", "longctx_drop", "longctx_coqa", "longctx_gsm8k",
                                              "passkey", "kv_recall"}
    assert all(PRIMARY_METRIC[t] == "answer_prob" for t in LIKELIHOOD_TASKS) and "answer_prob" not in LOWER_IS_BETTER
    assert base_task(COQA) == "longctx_coqa" and base_task("piqa") == "piqa"
    assert judge_of((COQA,)) == LIKELIHOOD_JUDGE and judge_of(("longctx_coqa",)) == "accuracy"
    assert judged_tasks(("longctx_squad", "longctx_qasper"), defaults=True) == (likelihood_task("longctx_squad"),)
    for tasks in (("piqa",), ("longctx_qasper",), ("longctx_squad_bpb",)):
        with pytest.raises(ConfigError, match="generate none"):
            judged_tasks(tasks)


def test_a_problem_is_judged_one_way():
    from poptune.problem.problem import TuningProblem

    with pytest.raises(ConfigError, match="judged one way"):
        TuningProblem(model="tiny-llama", tasks=("passkey", likelihood_task("kv_recall")))
    with pytest.raises(ConfigError, match="cannot be judged by likelihood"):
        TuningProblem(model="tiny-llama", tasks=("piqa:likelihood",))
    judged = TuningProblem(model="tiny-llama", tasks=(likelihood_task("passkey"),))
    assert judged.judge == LIKELIHOOD_JUDGE and TuningProblem(model="tiny-llama").judge == "accuracy"


def test_task_pack_items_are_scored_as_prompt_requests(shared, eval_data):
    model, tokenizer = shared("tiny-llama")
    full_answers(model).clear()
    workload = build_workload(tokenizer, (COQA, "longctx_coqa"), data_dir=eval_data, cap=None, max_positions=4096)
    assert workload.order[COQA] == workload.order["longctx_coqa"] and len(workload.order[COQA]) == 3  # same items
    requests = task_requests(tokenizer, COQA, workload.order[COQA], data_dir=eval_data, synthetic_lengths=(64,),
                             seed=0)
    assert all(r.max_tokens == 50 and r.stop == ("\n\n",) and r.prompt for r in requests.values())
    first = workload.order[COQA][:1]  # one item: its 50 new tokens are what a tiny model's CPU run costs here
    spec = EvalSpec(tasks=(COQA,), data_dir=eval_data, fidelity=None, samples={COQA: first})
    full = measure_tasks(model, tokenizer, PopConfig(skip=0), spec)
    pop = measure_tasks(model, tokenizer, PopConfig(skip=2), spec)
    for run in (full, pop):
        assert run.items == {COQA: first} and set(run.scores[COQA]) == {"answer_prob"}
        assert all(0.0 <= v <= 1.0 for v in run.outcomes[COQA])
        assert set(run.details["likelihood_items"][COQA]) == set(first)
    rows = pop.details["likelihood_items"][COQA]
    assert all(row["tokens"] > 200 for row in rows.values())  # the long prompts themselves were prefilled
    # beside the likelihood, each answer's grade by the task's own metric (F1), POP's and the full model's
    for run in (full, pop):
        assert all(0.0 <= row["correct"] <= 1.0 and 0.0 <= row["full_correct"] <= 1.0
                   for row in run.details["likelihood_items"][COQA].values())
    assert all(row["correct"] == row["full_correct"] for row in full.details["likelihood_items"][COQA].values())


def test_an_item_is_graded_by_its_tasks_own_metric(shared, eval_data):
    from poptune.evaluate.synthetic import is_correct
    from poptune.evaluate.taskpack import get_task_dict

    _, tokenizer = shared("tiny-llama")
    index = 0
    request = task_requests(tokenizer, COQA, [index], data_dir=eval_data, synthetic_lengths=(64,), seed=0,
                            metric=PRIMARY_METRIC["longctx_coqa"])[index]
    assert PRIMARY_METRIC["longctx_coqa"] == "f1"  # what an accuracy study of the task reads
    task = get_task_dict(["longctx_coqa"], eval_data)["tasks"]["longctx_coqa"]
    gold = task.doc_to_target(task.eval_docs[index])
    gold = gold[0] if isinstance(gold, list) else gold
    assert request.grade is not None and request.grade(str(gold)) == 1.0 and request.grade("zzzz qqqq") == 0.0
    passkey = task_requests(tokenizer, likelihood_task("passkey"), [3], data_dir=None, synthetic_lengths=(256,),
                            seed=0)[3]
    from poptune.evaluate.workload import synthetic_pool

    answer = synthetic_pool(tokenizer, "passkey", 4, lengths=(256,), seed=0)[3].answer
    assert passkey.grade is not None and passkey.grade(f" {answer}. Done") == float(is_correct(f" {answer}", answer))
    assert passkey.grade(" 0") == 0.0 and passkey.grade(f" {answer}") == 1.0


def test_rounds_keep_every_items_likelihood_figures():
    from poptune.evaluate.racing import extend_run
    from poptune.evaluate.suite import LIKELIHOOD_ITEMS, TaskRun

    first = TaskRun({COQA: {"answer_prob": 0.5}}, {COQA: [0]}, {COQA: [0.5]}, {LIKELIHOOD_ITEMS: {COQA: {0: {"x": 1}}}})
    more = TaskRun({COQA: {"answer_prob": 0.7}}, {COQA: [1]}, {COQA: [0.7]}, {LIKELIHOOD_ITEMS: {COQA: {1: {"x": 2}}}})
    assert extend_run(first, more).details[LIKELIHOOD_ITEMS] == {COQA: {0: {"x": 1}, 1: {"x": 2}}}


def test_beside_a_likelihood_verdict_the_accuracy_verdicts_cost_is_said():
    from poptune.evaluate.suite import LIKELIHOOD_ITEMS, TaskRun
    from poptune.problem.problem import TuningProblem
    from poptune.reports.certification import cost_lines
    from poptune.store.front import FrontRow
    from poptune.tune.certify import accuracy_cost

    problem = TuningProblem(model="tiny-llama", tasks=(likelihood_task("passkey"),), certify_limit=64)
    rows = {i: {"correct": float(i % 10 == 0), "full_correct": 0.0} for i in range(100)}  # 10 of 100 changed grade
    run = TaskRun({}, {}, {}, {LIKELIHOOD_ITEMS: {likelihood_task("passkey"): rows}})
    cost = accuracy_cost(run, 200.0, problem, 0.95)
    assert cost is not None and cost["graded"] == 100 and cost["flipped"] == 10
    assert cost["flip_rate"] == pytest.approx(11 / 102) and cost["seconds_per_item"] == pytest.approx(2.0)
    fewer = accuracy_cost(TaskRun({}, {}, {}, {LIKELIHOOD_ITEMS: {likelihood_task("passkey"): {
        i: {"correct": 0.0, "full_correct": 0.0} for i in range(100)}}}), 200.0, problem, 0.95)
    assert fewer is not None and fewer["items"] < cost["items"]  # fewer flips, fewer items needed
    assert accuracy_cost(TaskRun({}, {}, {}, {}), 1.0, problem, 0.95) is None  # nothing graded: nothing said
    row = FrontRow(trial=1, config=PopConfig(2), method="pop", speedup=1.1, drop=0.0, feasible=True,
                   verdict="certified within")
    line, = cost_lines([row], {"candidates": [{"accuracy_cost": cost}]}, 2.0, [], judge=LIKELIHOOD_JUDGE)
    assert "beside its likelihood verdict, an accuracy verdict" in line and f"about {cost['items']:,} items" in line
    assert "10 of its 100 fresh items changed grade" in line
    assert "moving by 32.8 points (root mean square" in line and "with one added" not in line  # not a share of items
    assert "reach only 75-80% of the time (a planning figure, not a promise)" in line  # what the F1 races reach


def test_beside_a_likelihood_verdict_the_accuracy_drop_on_the_same_items_is_printed():
    from poptune.evaluate.paired import paired_drop
    from poptune.evaluate.suite import LIKELIHOOD_ITEMS, TaskRun
    from poptune.reports.certification import cost_lines
    from poptune.store.front import FrontRow
    from poptune.tune.certify import accuracy_drop

    task = likelihood_task("passkey")
    # F1-like grades: the full model's 0.8 on every item; the candidate's 0.3 on every 4th, its answer changed on 30
    rows = {i: {"correct": 0.3 if i % 4 == 0 else 0.8, "full_correct": 0.8, "unchanged": float(i >= 30)}
            for i in range(100)}
    said = accuracy_drop(TaskRun({}, {}, {}, {LIKELIHOOD_ITEMS: {task: rows}}))
    assert said is not None and said["items"] == 100 and (said["changed"], said["answers"]) == (30, 100)
    expected = paired_drop({task: [0.8] * 100}, {task: [f["correct"] for f in rows.values()]})
    assert said["drop"]["mean"] == pytest.approx(12.5) and said["drop"]["hi"] == pytest.approx(expected.hi)
    assert accuracy_drop(TaskRun({}, {}, {}, {})) is None
    row = FrontRow(trial=1, config=PopConfig(2), method="pop", speedup=1.1, drop=0.0, feasible=True,
                   verdict="certified within")
    line, = cost_lines([row], {"candidates": [{"accuracy_drop": said}]}, 2.0, [], judge=LIKELIHOOD_JUDGE)
    assert re.fullmatch(r"2/last/0: accuracy drop on the same items: \+12\.50 \[\+\d+\.\d\d, \+\d+\.\d\d\] points "
                        r"\(tasks' own metric, 95%, not certified\); answer changed on 30 of 100 items \(30\.0%\)",
                        line), line
    assert f"[{expected.lo:+.2f}, {expected.hi:+.2f}]" in line
    assert cost_lines([row], {"candidates": [{}]}, 2.0, [], judge=LIKELIHOOD_JUDGE) == []  # stored before: nothing


def test_its_outcome_equals_the_prompts_file_path(shared, tmp_path):
    model, tokenizer = shared("tiny-llama")
    task = likelihood_task("passkey")
    items = [0, 1]
    requests = task_requests(tokenizer, task, items, data_dir=None, synthetic_lengths=(256,), seed=0)
    assert all(not r.stop for r in requests.values())  # the synthetic tasks have no stop sequences
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps({"prompt": requests[i].prompt, "max_tokens": requests[i].max_tokens}) + "\n"
                            for i in items), encoding="utf-8")
    spec = EvalSpec(tasks=(task,), fidelity=None, batch_size=2, synthetic_lengths=(256,), samples={task: items})
    for config in (PopConfig(skip=0), PopConfig(skip=3)):
        full_answers(model).clear()
        judged = measure_tasks(model, tokenizer, config, spec)
        full_answers(model).clear()
        filed = score_prompts(model, tokenizer, config, str(path), list(range(len(items))), batch_size=2,
                              task=LIKELIHOOD)
        assert judged.outcomes[task] == pytest.approx(filed.outcomes[LIKELIHOOD], abs=1e-6)


def test_an_answer_stops_before_its_tasks_stop_sequence(shared):
    _, tokenizer = shared("tiny-llama")
    ids = tuple(tokenizer("Paris.\n\nQuestion: next", add_special_tokens=False)["input_ids"])
    cut = _cut(tokenizer, ids, ("\n\n",))
    assert tokenizer.decode(list(cut)) == "Paris."
    assert _cut(tokenizer, ids, ()) == ids and _cut(tokenizer, ids, ("nowhere",)) == ids


@pytest.mark.parametrize("command", ["study", "eval"])
@pytest.mark.parametrize("tasks", ["piqa", "longctx_qasper", "longctx_squad_bpb", "longctx_coqa,piqa"])
def test_a_task_that_cannot_be_judged_by_likelihood_is_refused_in_one_line(tmp_path, capsys, no_model_load,
                                                                          eval_data, command, tasks):
    argv = [command, "--model", "tiny-llama", "--judge", "likelihood", "--tasks", tasks, "--data-dir", str(eval_data)]
    argv += ["--storage", f"sqlite:///{tmp_path / 's.db'}"] if command == "study" else ["--skip", "1"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--judge likelihood" in err and "generate none" in err, err
    assert not (tmp_path / "s.db").exists()


def test_an_answers_judge_still_needs_a_prompts_file(tmp_path, capsys, no_model_load):
    argv = ["study", "--model", "tiny-llama", "--judge", "answers", "--tasks", "embedded",
            "--storage", f"sqlite:///{tmp_path / 's.db'}"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "goes with `--prompts FILE`" in err, err


def test_the_budget_and_verdict_lines_say_likelihood_never_accuracy():
    from poptune.reports.certification import budget_words, verdict_line
    from poptune.reports.study_report import undecided_line
    from poptune.tune.certify import CertificationPlan

    line = verdict_line([], {"candidates": []}, 2.0, judge=LIKELIHOOD_JUDGE)
    assert "likelihood budget of 2 points" in line and "not an accuracy one" in line
    assert verdict_line([], None, None, judge=LIKELIHOOD_JUDGE) == "no likelihood budget: nothing to certify"
    assert verdict_line([], None, None) == "no accuracy budget: nothing to certify"  # the default is unchanged
    assert budget_words(2.0) == "the budget of 2 points"
    assert undecided_line([], 2.0, LIKELIHOOD_JUDGE) == ""
    plan = CertificationPlan(per_task=64, tasks=1, needed=64, affordable=None, supply=64, flip_rate=0.1,
                             seconds_per_item=1.0, smallest_budget=2.0)
    assert "2-point likelihood verdict" in plan.line("3/last/0", 2.0, LIKELIHOOD_JUDGE)
    assert "2-point verdict" in plan.line("3/last/0", 2.0)


def test_a_likelihood_study_runs_and_says_so(tmp_path, capsys, monkeypatch):
    from poptune import store
    from poptune.store.front import FrontRow

    # The front of a tiny model is decided by timing noise: the paper's rule is the candidate, whatever it timed.
    monkeypatch.setattr("poptune.tune.certify.candidates", lambda study, *args: [
        FrontRow.from_trial(t) for t in store.completed(study) if t.user_attrs["config"]["skip"] > 0][:1])
    code = main(["study", "--model", "tiny-llama", "--judge", "likelihood", "--tasks", "kv_recall", "--limit", "2",
                 "--items", "2", "--certify", "2", "--trials", "2", "--kv", "own", "--repeats", "1", "--max-pairs", "3",
                 "--precision", "0", "--storage", f"sqlite:///{tmp_path}/s.db"])
    out = capsys.readouterr().out
    assert code == 0
    assert "judged by likelihood" in out
    verdict = next(line for line in out.splitlines() if line.startswith("verdict:"))
    assert "likelihood budget of 2 points" in verdict and "not an accuracy one" in verdict
    # beside the likelihood verdict of the candidate raced on fresh items, what an accuracy verdict would cost
    assert "2/last/0: beside its likelihood verdict, an accuracy verdict (the tasks' own metric)" in out, out
    summary = next(tmp_path.glob("s.*.md")).read_text()
    assert "`kv_recall:likelihood`" in summary and "- likelihood budget:" in summary
