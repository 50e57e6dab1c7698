"""The long-prompt tasks (``longctx_*``): built from the pack's rows, scored per item, reachable by name."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from poptune.errors import ConfigError, DataError
from poptune.evaluate.suite import LOWER_IS_BETTER, PRIMARY_METRIC, EvalSpec, measure_tasks, resolve_tasks
from poptune.evaluate.taskpack import GROUPS, LONG_BPB_TASKS, LONG_TASKS, SHORT_TASKS, TASKS, check_data, get_task_dict
from poptune.evaluate.tasks.longctx import UNTIL

#: Real rows (the 3 shortest of each file, verbatim): tests/data/longctx, see tests/data/README.md.
FIXTURES = Path(__file__).resolve().parents[1] / "data"
FILES = {"squad": "squad", "drop": "drop", "coqa": "coqa", "gsm8k": "gsm8k", "qasper": "qasper_yesno"}
ALL = LONG_TASKS + LONG_BPB_TASKS


def _file(task: str) -> str:
    return FILES[task.removeprefix("longctx_").removesuffix("_bpb")]


def _rows(root: Path, file: str) -> list[dict]:
    return [json.loads(line) for line in (root / "longctx" / f"{file}.jsonl").read_text(encoding="utf-8").splitlines()]


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _short(file: str, question: str, answer: str) -> dict:
    return {"id": question, "context": f"Passage: A short text.\nQuestion: {question}\nAnswer:",
            "continuation": f" {answer}", "answers": [answer], "until": UNTIL[file]}


def write_short_pack(root: Path) -> Path:
    """Two hand-made short rows per file, in the pack's format: fast runs on a tiny model."""
    for file in ("squad", "coqa"):
        _jsonl(root / f"longctx/{file}.jsonl", [_short(file, "Who?", "Ann"), _short(file, "Where?", "in Rome")])
    _jsonl(root / "longctx/drop.jsonl", [{**_short("drop", "How many?", "2"), "answers": [["2"]]},
                                         {**_short("drop", "Which?", "A, B"), "answers": [["A", "B"], ["A"]]}])
    worked = [("2+2?", "2 + 2 = 4. So the answer is 4.", "4"), ("3*3?", "3 * 3 = 9. So the answer is 9.", "9")]
    _jsonl(root / "longctx/gsm8k.jsonl", [{**_short("gsm8k", q, a), "answers": [n]} for q, a, n in worked])
    _jsonl(root / "longctx/qasper_yesno.jsonl",
           [{"id": f"q{i}", "context": "Context: x\nQuestion: yes?\n A. Yes\n B. No\nAnswer:", "choices": [" A", " B"],
             "label": i} for i in (0, 1)])
    return root


@pytest.fixture(scope="module")
def fixture_tasks() -> dict:
    return get_task_dict(["longctx", "longctx_bpb"], FIXTURES)["tasks"]


# --------------------------------------------------------------------------- names and metrics


def test_groups_and_names():
    assert set(TASKS) == set(SHORT_TASKS) | set(ALL)
    assert GROUPS == {"longctx": LONG_TASKS, "longctx_bpb": LONG_BPB_TASKS}
    assert resolve_tasks("longctx,longctx_squad_bpb", FIXTURES) == LONG_TASKS + ("longctx_squad_bpb",)
    assert resolve_tasks("longctx_bpb", FIXTURES) == LONG_BPB_TASKS
    assert resolve_tasks(None, FIXTURES) == SHORT_TASKS
    with pytest.raises(ConfigError, match="did you mean 'longctx_squad'"):
        check_data(FIXTURES, ["longctx_sqad"])
    assert {PRIMARY_METRIC[t] for t in LONG_BPB_TASKS} == {"bpb"} <= LOWER_IS_BETTER
    assert [PRIMARY_METRIC[t] for t in LONG_TASKS] == ["f1", "f1", "f1", "exact_match", "acc"]


def test_names_do_not_collide_with_lm_eval_tasks():
    """No YAML of lm-eval's registry uses our task or group names as a word (``babilong_longctx`` exists), so the
    lm-eval route can add our tasks beside its own."""
    import lm_eval.tasks

    ours = set(ALL) | set(GROUPS)
    root = Path(lm_eval.tasks.__file__).parent
    clashes = [p for p in root.rglob("*.yaml")
               if ours & set(re.findall(r"[\w.-]+", p.read_text(encoding="utf-8", errors="replace")))]
    assert clashes == []
    assert all(t.startswith("longctx_") for t in ALL)


# --------------------------------------------------------------------------- what each task builds


@pytest.mark.parametrize("task", ALL)
def test_requests_are_the_rows_byte_for_byte(fixture_tasks, task):
    rows = _rows(FIXTURES, _file(task))
    built = fixture_tasks[task]
    built.build_all_requests()
    by_doc: dict[int, list] = {}
    for inst in built.instances:
        by_doc.setdefault(inst.doc_id, []).append(inst.arguments)
    assert len(by_doc) == len(rows) == 3
    for doc_id, row in enumerate(rows):
        args = by_doc[doc_id]
        assert all(a[0] == row["context"] for a in args)
        if task in LONG_BPB_TASKS:
            assert [a[1] for a in args] == [row["continuation"]]
        elif task == "longctx_qasper":
            assert [a[1] for a in args] == row["choices"]
            assert built.doc_to_target(built.eval_docs[doc_id]) == row["label"]
        else:
            (gen,) = [a[1] for a in args]
            assert gen["until"] == row["until"] and gen["do_sample"] is False
            assert gen["max_gen_toks"] == (256 if task == "longctx_gsm8k" else 50)


class _Scripted:
    """An lm-eval LM giving fixed generations per context, and log-likelihoods that favour the first choice."""

    def __new__(cls, generations: dict[str, str]):
        from lm_eval.api.model import LM

        class Scripted(LM):
            def loglikelihood(self, requests):
                # 2 bits per byte of the continuation, a little less for " A".
                return [(-2 * math.log(2) * len(r.args[1].encode()) + (0.5 if r.args[1] == " A" else 0.0), False)
                        for r in requests]

            def loglikelihood_rolling(self, requests):
                raise NotImplementedError

            def generate_until(self, requests):
                return [generations[r.args[0]] for r in requests]

        return Scripted()


def _per_item(out: dict, task: str, metric: str) -> list[float]:
    return [float(s[metric]) for s in sorted(out["samples"][task], key=lambda s: s["doc_id"])]


def test_per_item_scores_through_the_yamls(fixture_tasks):
    """Hand-made generations for the real rows: each task's metric per item, in lm-eval's per-sample logs."""
    from lm_eval.evaluator import evaluate

    rows = {f: _rows(FIXTURES, f) for f in FILES.values()}
    squad, drop, coqa, gsm8k = (rows[f] for f in ("squad", "drop", "coqa", "gsm8k"))
    generations = {
        squad[0]["context"]: " Lady Gaga\nQuestion: more",  # the first line counts
        squad[1]["context"]: " no idea",
        # Gold "1899" or "In 1899": 1 of 4 tokens (F1 0.4) or 2 of 4 (F1 2/3); the best counts.
        squad[2]["context"]: " in 1899 or 1900",
        drop[0]["context"]: " 45 to 64",
        drop[1]["context"]: " 999",
        drop[2]["context"]: " 64.30",  # numbers normalised
        coqa[0]["context"]: " no",
        coqa[1]["context"]: " nothing",
        coqa[2]["context"]: " Angry!",
        gsm8k[0]["context"]: " He loses to 4 people. So the answer is 4.",
        gsm8k[1]["context"]: " Some work. So the answer is 72.",
        gsm8k[2]["context"]: " The answer is 3.",  # not the pack's answer phrase
    }
    out = evaluate(_Scripted(generations), get_task_dict(["longctx", "longctx_bpb"], FIXTURES), bootstrap_iters=0,
                   log_samples=True, verbosity="WARNING")
    assert _per_item(out, "longctx_squad", "em") == [1.0, 0.0, 0.0]
    assert _per_item(out, "longctx_squad", "f1") == pytest.approx([1.0, 0.0, 2 / 3])
    assert _per_item(out, "longctx_drop", "em") == [1.0, 0.0, 1.0]
    assert _per_item(out, "longctx_drop", "f1") == [1.0, 0.0, 1.0]
    assert _per_item(out, "longctx_coqa", "em") == [1.0, 0.0, 1.0]
    assert _per_item(out, "longctx_gsm8k", "exact_match") == [1.0, 0.0, 0.0]
    assert _per_item(out, "longctx_qasper", "acc") == [float(r["label"] == 0) for r in rows["qasper_yesno"]]
    for task in LONG_BPB_TASKS:
        assert _per_item(out, task, "bpb") == pytest.approx([2.0, 2.0, 2.0])
        assert out["results"][task]["bpb,none"] == pytest.approx(2.0)
        assert out["higher_is_better"][task]["bpb"] is False
    assert out["results"]["longctx_squad"]["f1,none"] == pytest.approx(5 / 9)


# --------------------------------------------------------------------------- real runs on a tiny model


def test_tiny_model_run_logs_every_items_metrics(tmp_path):
    """Every task through lm-eval and PopLM (POP prefill, then generation or scoring), 2 items each."""
    from lm_eval.evaluator import evaluate

    from poptune.evaluate.lm import PopLM
    from poptune.models import load_model

    model, tok = load_model("tiny-llama")
    lm = PopLM(pretrained=model, tokenizer=tok, skip=2, batch_size=2)
    task_dict = get_task_dict(["longctx", "longctx_bpb"], write_short_pack(tmp_path))
    for name in LONG_TASKS[:4]:  # random weights never say "\n\n": keep generations short
        task_dict["tasks"][name].set_config(
            "generation_kwargs", {**task_dict["tasks"][name].config.generation_kwargs, "max_gen_toks": 8})
    out = evaluate(lm, task_dict, limit=2, bootstrap_iters=0, log_samples=True, verbosity="WARNING")
    keys = {"longctx_squad": {"em", "f1"}, "longctx_drop": {"em", "f1"}, "longctx_coqa": {"em", "f1"},
            "longctx_gsm8k": {"exact_match"}, "longctx_qasper": {"acc"}, **dict.fromkeys(LONG_BPB_TASKS, {"bpb"})}
    for task, metrics in keys.items():
        samples = out["samples"][task]
        assert sorted(s["doc_id"] for s in samples) == [0, 1], task
        for s in samples:
            assert set(s["metrics"]) == metrics, task
            assert all(isinstance(s[m], (int, float)) for m in metrics), task
    assert all(out["results"][t]["bpb,none"] > 0 for t in LONG_BPB_TASKS)


def test_measure_tasks_reads_the_new_metrics(tmp_path):
    from poptune.engine import PopConfig
    from poptune.models import load_model

    model, tok = load_model("tiny-llama")
    spec = EvalSpec(tasks=("longctx_qasper", "longctx_squad_bpb"), data_dir=write_short_pack(tmp_path), limit=2,
                    fidelity=None)
    run = measure_tasks(model, tok, PopConfig(skip=2), spec)
    assert run.counts == {"longctx_qasper": 2, "longctx_squad_bpb": 2}
    assert set(run.scores["longctx_qasper"]) == {"acc"} and set(run.scores["longctx_squad_bpb"]) == {"bpb"}
    assert all(len(v) == 2 for v in run.outcomes.values())  # every item's outcome, for paired drops


def test_lm_eval_route_finds_the_long_tasks(tmp_path):
    env = {**os.environ, "POPTUNE_DATA": str(write_short_pack(tmp_path / "data")), "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "poptune.evaluate.harness", "run", "--model", "poptune",
         "--model_args", "pretrained=tiny-llama,skip=2,boundary=last", "--tasks", "longctx_qasper,longctx_bpb",
         "--limit", "2", "--device", "cpu"],
        env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "|longctx_qasper" in out.stdout and "|bpb" in out.stdout
    assert all(t in out.stdout for t in LONG_BPB_TASKS), out.stdout  # the group longctx_bpb ran its four tasks


# --------------------------------------------------------------------------- bad input


def test_missing_file_is_one_data_error(tmp_path):
    root = write_short_pack(tmp_path / "data")
    (root / "longctx/drop.jsonl").unlink()
    with pytest.raises(DataError, match=r"longctx_drop_bpb: .*longctx/drop\.jsonl is missing \(expected JSON lines "
                                        r"with id, context, continuation, answers \(a list of alternatives"):
        check_data(root, ["longctx_drop_bpb"])
    check_data(root, ["longctx_squad", "longctx_qasper"])  # the other files are still usable


@pytest.mark.parametrize(
    ("file", "change", "message"),
    [
        ("squad", lambda r: "not json", r"squad\.jsonl is malformed at line 2: .*expected JSON lines with id, context"),
        ("squad", lambda r: {k: v for k, v in r.items() if k != "context"}, "line 2: missing field 'context'"),
        ("coqa", lambda r: {**r, "answers": []}, "field 'answers' must be a non-empty list of strings"),
        ("drop", lambda r: {**r, "answers": ["2"]}, "field 'answers' must be a non-empty list of alternatives"),
        ("gsm8k", lambda r: {**r, "until": ["\n"]}, r"field 'until' must be \['Question:'"),
        ("gsm8k", lambda r: {k: v for k, v in r.items() if k != "until"}, "missing field 'until'"),
        ("qasper_yesno", lambda r: {**r, "label": 2}, r"field 'label' must be an index into 'choices' \(0\.\.1\)"),
    ],
)
def test_malformed_line_is_one_data_error(tmp_path, file, change, message):
    root = write_short_pack(tmp_path / "data")
    rows = _rows(root, file)
    changed = change(rows[1])
    (root / f"longctx/{file}.jsonl").write_text(
        json.dumps(rows[0]) + "\n" + (changed if isinstance(changed, str) else json.dumps(changed)) + "\n")
    task = "longctx_qasper" if file == "qasper_yesno" else f"longctx_{file}"
    with pytest.raises(DataError, match=message):
        check_data(root, [task])


def test_cli_bad_pack_file_is_one_line_exit_2(tmp_path, capsys):
    from poptune.cli import main

    root = write_short_pack(tmp_path / "data")
    (root / "longctx/squad.jsonl").write_text("{broken\n")
    path = tmp_path / "out.json"
    code = main(["eval", "--model", "tiny-llama", "--skip", "2", "--tasks", "longctx_squad_bpb",
                 "--data-dir", str(root), "--fidelity-pairs", "0", "--out", str(path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "squad.jsonl is malformed at line 1" in err
    assert not path.exists()
