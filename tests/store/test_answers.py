"""The full model's answers remembered: read back under the same key, missed under any other, cleared on demand."""

from __future__ import annotations

import sqlite3

from poptune.store.answers import ANSWERS_FILE, FullAnswers, answers_path, item_key

SETTINGS = {"weights": "random-seed0-abc", "batch_size": 8, "seed": 0, "torch": "2.13.0"}


def test_an_answer_is_read_back_under_its_key_and_missed_under_another(tmp_path):
    path = tmp_path / ANSWERS_FILE
    FullAnswers(path, SETTINGS).put("passkey", {3: 1.0, 4: 0.0})
    same = FullAnswers(path, dict(SETTINGS))
    assert same.get("passkey", [3, 4, 5]) == {3: 1.0, 4: 0.0} and same.read == 2
    for changed in ({**SETTINGS, "weights": "other"}, {**SETTINGS, "batch_size": 4}, {**SETTINGS, "torch": "2.14"}):
        assert FullAnswers(path, changed).get("passkey", [3, 4]) == {}
    assert same.get("kv_recall", [3, 4]) == {}
    assert item_key(SETTINGS, "passkey", 3) != item_key(SETTINGS, "passkey", 4)


def test_the_first_answer_stored_is_kept_and_clear_forgets_everything(tmp_path):
    path = tmp_path / "a" / ANSWERS_FILE  # the folder is made on the first write
    answers = FullAnswers(path, SETTINGS)
    assert answers.get("passkey", [1]) == {} and not path.exists()  # reading creates nothing
    answers.put("passkey", {1: 1.0})
    answers.put("passkey", {1: 0.0})
    assert answers.get("passkey", [1]) == {1: 1.0}
    assert answers.clear() == 1 and answers.get("passkey", [1]) == {}
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_the_answers_live_beside_a_storage_file_and_nowhere_for_a_server(tmp_path):
    assert answers_path(f"sqlite:///{tmp_path}/s.db") == tmp_path / ANSWERS_FILE
    assert answers_path(f"journal:{tmp_path}/j.log") == tmp_path / ANSWERS_FILE
    assert answers_path("postgresql://u@h/db") is None and answers_path("sqlite:///:memory:") is None


def test_a_resumed_evaluator_reads_the_full_models_answers_instead_of_scoring(shared, tmp_path, monkeypatch):
    from poptune.problem.evaluator import ConfigEvaluator
    from poptune.problem.problem import TuningProblem

    problem = TuningProblem(model="tiny-llama", tasks=("kv_recall",), lengths=(300,), limit=4, items_start=4,
                            certify_limit=0)
    first = ConfigEvaluator(problem, model=shared("tiny-llama"))
    first.remember_answers(tmp_path / ANSWERS_FILE)
    run = first.full_run({"kv_recall": 4})
    assert first.answers.written == 4
    second = ConfigEvaluator(problem, model=shared("tiny-llama"))
    second.remember_answers(tmp_path / ANSWERS_FILE)
    monkeypatch.setattr(second, "_score", lambda *a, **k: (_ for _ in ()).throw(AssertionError("scored")))
    again = second.full_run({"kv_recall": 4})
    assert again.outcomes == run.outcomes and again.items == run.items and second.answers.read == 4
