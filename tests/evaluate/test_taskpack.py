"""The offline lm-eval task pack: local files in, the built-in tasks' prompts, choices, targets and metrics out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from poptune.errors import ConfigError, DataError
from poptune.evaluate.taskpack import SHORT_TASKS, check_data, data_dir, get_task_dict

TASKS = SHORT_TASKS  # the six tasks with lm-eval's built-in names; the long ones are in test_longctx.py

# --------------------------------------------------------------------------- tiny data in the original formats

PIQA = [
    {"goal": "How do I dry a wet phone?", "sol1": "Put it in rice.", "sol2": "Put it in the oven at 250C."},
    {"goal": "To open a jar,", "sol1": "hit the lid with a feather.", "sol2": "run the lid under hot water."},
    {"goal": "Keep bread fresh", "sol1": "in a bread box", "sol2": "in a sunny window sill for a week"},
]
PIQA_LABELS = [0, 1, 0]


def _arc(qid: str, stem: str, choices: list[tuple[str, str]], answer: str) -> dict:
    return {"id": qid, "question": {"stem": stem, "choices": [{"text": t, "label": lab} for lab, t in choices]},
            "answerKey": answer}


ARC_EASY = [
    _arc("e1", "Which is a mammal?", [("A", "shark"), ("B", "whale"), ("C", "trout"), ("D", "eel")], "B"),
    _arc("e2", "What melts ice fastest?", [("1", "salt"), ("2", "sand"), ("3", "sawdust")], "1"),
    _arc("e3", "Which planet is largest?",
         [("A", "Mars"), ("B", "Venus"), ("C", "Earth"), ("D", "Mercury"), ("E", "Jupiter")], "E"),
]
ARC_CHALLENGE = [
    _arc("c1", "Which gas do plants take in?", [("A", "oxygen"), ("B", "carbon dioxide"), ("C", "helium"),
                                               ("D", "neon")], "B"),
    _arc("c2", "Sound travels fastest in", [("1", "air"), ("2", "water"), ("3", "steel"), ("4", "a vacuum")], "3"),
]
HELLASWAG = [
    {"ind": 24, "activity_label": "Roof shingle removal", "ctx_a": "A man is sitting on a roof.", "ctx_b": "he",
     "ctx": "A man is sitting on a roof. he", "split": "val", "split_type": "indomain", "label": 3,
     "endings": ["is using wrap.", "is ripping  tiles off.", "is holding a cube.", "starts pulling up roofing."],
     "source_id": "activitynet~v_x"},
    {"ind": 7, "activity_label": "Home and Garden",
     "ctx_a": "[header] How to clean a kettle [title] Fill the kettle with water.", "ctx_b": "",
     "ctx": "[header] How to clean a kettle [title] Fill the kettle with water.", "split": "val",
     "split_type": "zeroshot", "label": 0,
     "endings": ["[step] Boil it for five minutes.", "Throw it away.", "Paint it blue.", "Sell it."],
     "source_id": "wikihow~1"},
    {"ind": 9, "activity_label": "Clean and jerk", "ctx_a": "A lady walks to a barbell.", "ctx_b": "the lady",
     "ctx": "A lady walks to a barbell. the lady", "split": "val", "split_type": "zeroshot", "label": 1,
     "endings": ["swings.", "lifts the barbell over her head.", "sits.", "leaves."], "source_id": "activitynet~v_y"},
]
WINOGRANDE = [
    {"sentence": "Sarah was a better surgeon than Maria so _ got the easier cases.", "option1": "Sarah",
     "option2": "Maria", "answer": "2"},
    {"sentence": "Sarah was a better surgeon than Maria so _ got the harder cases.", "option1": "Sarah",
     "option2": "Maria", "answer": "1"},
    {"sentence": "The trophy did not fit in the case because _ was too big.", "option1": "the trophy",
     "option2": "the case", "answer": "1"},
]
BOOLQ = [
    {"question": "is house tax and property tax are same", "title": "Property tax", "answer": True,
     "passage": "Property tax or 'house tax' is a local tax on buildings."},
    {"question": "is the moon a planet", "title": "Moon", "answer": False,
     "passage": "The Moon is Earth's only natural satellite."},
    {"question": "can penguins fly", "title": "Penguin", "answer": False, "passage": "Penguins are flightless birds."},
]


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def write_data(root: Path) -> Path:
    """A data directory with the layout of /work/shared/data and the tiny items above."""
    _jsonl(root / "piqa/valid.jsonl", PIQA)
    (root / "piqa/valid-labels.lst").write_text("".join(f"{x}\n" for x in PIQA_LABELS))
    _jsonl(root / "arc/ARC-Easy-Test.jsonl", ARC_EASY)
    _jsonl(root / "arc/ARC-Challenge-Test.jsonl", ARC_CHALLENGE)
    _jsonl(root / "hellaswag/hellaswag_val.jsonl", HELLASWAG)
    _jsonl(root / "winogrande/dev.jsonl", WINOGRANDE)
    _jsonl(root / "boolq/dev.jsonl", BOOLQ)
    return root


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    # Characters YAML cares about (": ", quotes, "#") must survive rendering into the task YAMLs.
    return write_data(tmp_path_factory.mktemp("taskpack") / 'my data: "v1" #copy')


@pytest.fixture(scope="module")
def tiny_tasks(tiny_dir) -> dict:
    return get_task_dict(TASKS, tiny_dir)["tasks"]


# --------------------------------------------------------------------------- what each task must produce

# (context, choices, gold) per document, written out by hand from the built-in YAMLs and utils.
EXPECTED = {
    "piqa": [
        ("Question: How do I dry a wet phone?\nAnswer:", ["Put it in rice.", "Put it in the oven at 250C."], 0),
        ("Question: To open a jar,\nAnswer:", ["hit the lid with a feather.", "run the lid under hot water."], 1),
        ("Question: Keep bread fresh\nAnswer:", ["in a bread box", "in a sunny window sill for a week"], 0),
    ],
    "arc_easy": [
        ("Question: Which is a mammal?\nAnswer:", ["shark", "whale", "trout", "eel"], 1),
        ("Question: What melts ice fastest?\nAnswer:", ["salt", "sand", "sawdust"], 0),
        ("Question: Which planet is largest?\nAnswer:", ["Mars", "Venus", "Earth", "Mercury", "Jupiter"], 4),
    ],
    "arc_challenge": [
        ("Question: Which gas do plants take in?\nAnswer:", ["oxygen", "carbon dioxide", "helium", "neon"], 1),
        ("Question: Sound travels fastest in\nAnswer:", ["air", "water", "steel", "a vacuum"], 2),
    ],
    "hellaswag": [
        ("Roof shingle removal: A man is sitting on a roof. He",
         ["is using wrap.", "is ripping tiles off.", "is holding a cube.", "starts pulling up roofing."], 3),
        # " [title]" -> ". ", other [tags] removed, then double spaces halved; "[step] Boil" keeps its space.
        ("Home and Garden: How to clean a kettle. Fill the kettle with water.",
         [" Boil it for five minutes.", "Throw it away.", "Paint it blue.", "Sell it."], 0),
        ("Clean and jerk: A lady walks to a barbell. The lady",
         ["swings.", "lifts the barbell over her head.", "sits.", "leaves."], 1),
    ],
    # WinoGrande scores one continuation after two contexts: doc_to_text is the gold context's index,
    # doc_to_choice the contexts, doc_to_target the shared continuation.
    "winogrande": [
        (1, ["Sarah was a better surgeon than Maria so Sarah", "Sarah was a better surgeon than Maria so Maria"],
         "got the easier cases."),
        (0, ["Sarah was a better surgeon than Maria so Sarah", "Sarah was a better surgeon than Maria so Maria"],
         "got the harder cases."),
        (0, ["The trophy did not fit in the case because the trophy",
             "The trophy did not fit in the case because the case"], "was too big."),
    ],
    "boolq": [
        ("Property tax -- Property tax or 'house tax' is a local tax on buildings.\n"
         "Question: is house tax and property tax are same?\nAnswer:", ["no", "yes"], 1),
        ("Moon -- The Moon is Earth's only natural satellite.\nQuestion: is the moon a planet?\nAnswer:",
         ["no", "yes"], 0),
        ("Penguin -- Penguins are flightless birds.\nQuestion: can penguins fly?\nAnswer:", ["no", "yes"], 0),
    ],
}

def _hub_arc(rows: list[dict]) -> list[dict]:
    """allenai/ai2_arc's layout: the question as a string, choices as parallel lists."""
    return [{"id": d["id"], "question": d["question"]["stem"],
             "choices": {"text": [c["text"] for c in d["question"]["choices"]],
                         "label": [c["label"] for c in d["question"]["choices"]]},
             "answerKey": d["answerKey"]} for d in rows]


# The same items as the hub datasets lm-eval's built-in tasks read would give them.
HUB_DOCS = {
    "piqa": [{**d, "label": g} for d, g in zip(PIQA, PIQA_LABELS)],
    "arc_easy": _hub_arc(ARC_EASY),
    "arc_challenge": _hub_arc(ARC_CHALLENGE),
    "hellaswag": [{**d, "label": str(d["label"])} for d in HELLASWAG],  # Rowan/hellaswag: label is a string
    "winogrande": WINOGRANDE,
    "boolq": [{"question": d["question"], "passage": f"{d['title']} -- {d['passage']}", "idx": i,
               "label": int(d["answer"])} for i, d in enumerate(BOOLQ)],
}
BUILTIN_YAML = {
    "piqa": "piqa/piqa.yaml",
    "arc_easy": "arc/arc_easy.yaml",
    "arc_challenge": "arc/arc_challenge.yaml",
    "hellaswag": "hellaswag/hellaswag.yaml",
    "winogrande": "winogrande/default.yaml",
    "boolq": "super_glue/boolq/default.yaml",
}
SAME_FIELDS = ("output_type", "doc_to_text", "doc_to_target", "doc_to_choice", "process_docs", "metric_list",
               "target_delimiter", "fewshot_delimiter", "should_decontaminate", "doc_to_decontamination_query")


def _builtin_config(task: str) -> dict:
    import lm_eval.tasks
    from lm_eval.tasks._yaml_loader import load_yaml

    return load_yaml(Path(lm_eval.tasks.__file__).parent / BUILTIN_YAML[task], resolve_func=True)


def _same(value):
    """Functions compare by where they are defined (lm-eval may load a module twice)."""
    return (value.__module__, value.__qualname__) if callable(value) else value


def _produced(task) -> list[tuple]:
    return [(task.doc_to_text(d), task.doc_to_choice(d), task.doc_to_target(d)) for d in task.eval_docs]


# --------------------------------------------------------------------------- tests


def test_tasks_load_under_the_plain_names(tiny_tasks):
    assert set(tiny_tasks) == set(TASKS)
    assert {name: len(task.eval_docs) for name, task in tiny_tasks.items()} == {
        name: len(rows) for name, rows in EXPECTED.items()
    }


@pytest.mark.parametrize("task", TASKS)
def test_contexts_choices_and_targets(tiny_tasks, task):
    assert _produced(tiny_tasks[task]) == EXPECTED[task]


@pytest.mark.parametrize("task", TASKS)
def test_config_matches_the_builtin_task(tiny_tasks, task):
    builtin, ours = _builtin_config(task), tiny_tasks[task].config
    for field in SAME_FIELDS:
        assert _same(getattr(ours, field)) == _same(builtin.get(field, getattr(ours.__class__(), field))), field
    assert ours.metadata["version"] == builtin["metadata"]["version"]


@pytest.mark.parametrize("task", TASKS)
def test_same_requests_as_the_builtin_task_on_hub_rows(tiny_tasks, task):
    """The built-in task, fed the hub's rows for the same items, builds exactly our requests."""
    import datasets
    from lm_eval.api.task import ConfigurableTask

    config = _builtin_config(task)
    splits = {s for s in (config.get("training_split"), config.get("validation_split"), config.get("test_split")) if s}
    hub = datasets.Dataset.from_list(HUB_DOCS[task])
    config["custom_dataset"] = lambda **_: datasets.DatasetDict({s: hub for s in splits})
    builtin = ConfigurableTask(config=config)
    ours = tiny_tasks[task]
    assert _produced(builtin) == _produced(ours) == EXPECTED[task]
    for t in (builtin, ours):
        t.build_all_requests()
    assert [i.arguments for i in builtin.instances] == [i.arguments for i in ours.instances]


def test_missing_file_names_file_and_format(tmp_path):
    root = write_data(tmp_path / "data")
    (root / "piqa/valid-labels.lst").unlink()
    with pytest.raises(DataError, match=r"piqa: .*piqa/valid-labels\.lst is missing \(expected JSON lines with goal"):
        check_data(root, ["piqa"])
    check_data(root, ["boolq", "winogrande"])  # the other tasks are still usable
    with pytest.raises(DataError, match="valid-labels.lst is missing"):
        get_task_dict(["boolq", "piqa"], root)
    with pytest.raises(DataError, match="does not exist"):
        check_data(tmp_path / "nowhere", TASKS)


@pytest.mark.parametrize(
    ("rel", "content", "message"),
    [
        ("hellaswag/hellaswag_val.jsonl", "not json\n", r"hellaswag_val\.jsonl is malformed at line 1: .*expected "
                                                        r"JSON lines with activity_label"),
        ("arc/ARC-Easy-Test.jsonl", '{"id": "x", "question": "a string", "answerKey": "A"}\n',
         r"arc_easy: .*ARC-Easy-Test\.jsonl is malformed at line 1: field 'question' must be an object"),
        ("winogrande/dev.jsonl", json.dumps({**WINOGRANDE[0], "answer": "3"}) + "\n",
         r"dev\.jsonl is malformed at line 1: field 'answer' must be \"1\" or \"2\""),
        ("boolq/dev.jsonl", json.dumps({k: v for k, v in BOOLQ[0].items() if k != "title"}) + "\n",
         r"missing field 'title' \(expected JSON lines with question, title, passage and answer"),
        ("piqa/valid-labels.lst", "0\n1\n", r"valid-labels\.lst has 2 labels but .*valid\.jsonl has 3 items"),
        ("piqa/valid-labels.lst", "0\n2\n1\n", r"valid-labels\.lst is malformed at line 2: '2' is not 0 or 1"),
        ("boolq/dev.jsonl", "", r"dev\.jsonl is empty"),
    ],
)
def test_malformed_file_names_file_and_format(tmp_path, rel, content, message):
    root = write_data(tmp_path / "data")
    (root / rel).write_text(content)
    task = {"hellaswag": "hellaswag", "arc": "arc_easy", "winogrande": "winogrande", "boolq": "boolq",
            "piqa": "piqa"}[rel.split("/")[0]]
    with pytest.raises(DataError, match=message):
        check_data(root, [task])


def test_malformed_line_past_the_checked_ones_fails_at_load(tmp_path):
    root = write_data(tmp_path / "data")
    _jsonl(root / "boolq/dev.jsonl", BOOLQ * 3 + [{**BOOLQ[0], "answer": "yes"}])
    check_data(root, ["boolq"])  # only the first lines are checked up front
    with pytest.raises(DataError, match=r"dev\.jsonl is malformed at line 10: field 'answer' must be true or false"):
        get_task_dict(["boolq"], root)


def test_unknown_task_suggests_a_name(tiny_dir):
    with pytest.raises(ConfigError, match="did you mean 'hellaswag'"):
        check_data(tiny_dir, ["helaswag"])


def test_data_dir_argument_then_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("POPTUNE_DATA", raising=False)
    assert data_dir() is None
    monkeypatch.setenv("POPTUNE_DATA", str(tmp_path))
    assert data_dir() == tmp_path.resolve()
    assert data_dir(tmp_path / "other") == (tmp_path / "other").resolve()


def _prefers_longest():
    """An lm-eval LM that scores a continuation by its length: the longest choice wins ``acc``."""
    from lm_eval.api.model import LM

    class PrefersLongest(LM):
        def loglikelihood(self, requests):
            return [(float(len(r.args[1])), False) for r in requests]

        def loglikelihood_rolling(self, requests):
            raise NotImplementedError

        def generate_until(self, requests):
            raise NotImplementedError

    return PrefersLongest()


def test_evaluate_reports_acc_under_plain_names(tiny_dir):
    import numpy as np
    from lm_eval.evaluator import evaluate

    task_dict = get_task_dict(TASKS, tiny_dir)
    results = evaluate(_prefers_longest(), task_dict, bootstrap_iters=0, log_samples=False)["results"]
    assert set(results) == set(TASKS)
    for task, rows in EXPECTED.items():
        if task == "winogrande":  # one continuation for both contexts: a tie, so the first context wins
            expected_acc = np.mean([gold == 0 for gold, _, _ in rows])
        else:
            expected_acc = np.mean([int(np.argmax([len(c) for c in choices])) == gold for _, choices, gold in rows])
        assert results[task]["acc,none"] == pytest.approx(expected_acc), task
        has_norm = task not in ("winogrande", "boolq")
        assert ("acc_norm,none" in results[task]) == has_norm, task
        if has_norm:
            assert 0.0 <= results[task]["acc_norm,none"] <= 1.0


def test_real_items_load_in_the_hub_layout(eval_data):
    check_data(eval_data, TASKS)
    tasks = get_task_dict(TASKS, eval_data)["tasks"]
    counts = {name: len(task.eval_docs) for name, task in tasks.items()}
    assert counts == dict.fromkeys(TASKS, 8)  # tests/data keeps the first 8 items of each set
    first = {name: task.eval_docs[0] for name, task in tasks.items()}
    assert first["piqa"]["goal"] == "How do I ready a guinea pig cage for it's new occupants?"
    assert first["piqa"]["label"] == 0
    assert first["arc_easy"]["answerKey"] in first["arc_easy"]["choices"]["label"]
    assert first["hellaswag"]["label"] == "3" and len(first["hellaswag"]["endings"]) == 4
    assert first["winogrande"]["answer"] in ("1", "2") and "_" in first["winogrande"]["sentence"]
    assert " -- " in first["boolq"]["passage"] and first["boolq"]["label"] in (0, 1)
