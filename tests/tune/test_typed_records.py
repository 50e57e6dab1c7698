"""A study's stored settings name its files as a user types them: no path of the machine it ran on."""

from __future__ import annotations

import dataclasses

import pytest

from poptune import ConfigError, store
from poptune.env import TuningProblem
from poptune.tune.study import StudySpec, run_study

from .fakes import FakeEvaluator, quiet_timing  # noqa: F401  (the fixture is autouse: no real A/A pairs)


def _problem(data_dir) -> TuningProblem:
    return TuningProblem(model="tiny-llama", max_drop=None, tasks=("piqa",), limit=4, data_dir=data_dir,
                         lengths=(16,), repeats=1, decode_tokens=0, precision=None)


def test_the_data_folder_is_stored_as_typed_and_a_study_resumes_wherever_the_folder_lies(tmp_path, monkeypatch):
    checkout = tmp_path / "checkout"
    (tmp_path / "shared" / "data").mkdir(parents=True)
    checkout.mkdir()
    monkeypatch.chdir(checkout)
    url = f"sqlite:///{tmp_path}/s.db"
    problem = _problem(str(tmp_path / "shared" / "data"))  # what the CLI hands down: the folder resolved
    study = run_study(StudySpec(problem=problem, trials=2, storage=url), evaluator=FakeEvaluator(problem))
    assert store.StoredStudy.of(study).problem["data_dir"] == "../shared/data"
    assert str(tmp_path) not in str(study.user_attrs)

    moved = dataclasses.replace(problem, data_dir=str(tmp_path / "elsewhere"))  # the same tasks, moved
    again = run_study(StudySpec(problem=moved, add=1, storage=url), evaluator=FakeEvaluator(moved))
    assert len(store.completed(again)) >= 3
    embedded = dataclasses.replace(problem, data_dir=None)  # the embedded data instead: other items
    with pytest.raises(ConfigError, match=r"other settings \(data_dir\)"):
        run_study(StudySpec(problem=embedded, add=1, storage=url), evaluator=FakeEvaluator(embedded))


def test_a_study_records_the_precision_it_measured_and_refuses_another(tmp_path):
    # The default dtype is named when the study is made (float32 on this suite's CPUs), so that a machine or a
    # version reading the default otherwise cannot mix precisions; a study stored without one was float32 on a CPU.
    import optuna

    url = f"sqlite:///{tmp_path}/s.db"
    problem = _problem(None)
    study = run_study(StudySpec(problem=problem, trials=2, storage=url), evaluator=FakeEvaluator(problem))
    assert store.StoredStudy.of(study).problem["dtype"] == "float32"
    from poptune.reports.study_report import summary_markdown

    assert "6 layers, float32; hardware: " in summary_markdown(study)  # the summary says the precision measured
    explicit = dataclasses.replace(problem, dtype="float32")
    assert len(store.completed(run_study(StudySpec(problem=explicit, add=1, storage=url),
                                         evaluator=FakeEvaluator(explicit)))) >= 3
    half = dataclasses.replace(problem, dtype="bfloat16")
    with pytest.raises(ConfigError, match=r"other settings \(dtype\)"):
        run_study(StudySpec(problem=half, add=1, storage=url), evaluator=FakeEvaluator(half))

    old = optuna.load_study(study_name=study.study_name, storage=url)  # as stored before the dtype was
    old.set_user_attr("problem", {**old.user_attrs["problem"], "dtype": None})
    assert len(store.completed(run_study(StudySpec(problem=problem, add=1, storage=url),
                                         evaluator=FakeEvaluator(problem)))) >= 4
    with pytest.raises(ConfigError, match=r"other settings \(dtype\)"):
        run_study(StudySpec(problem=half, add=1, storage=url), evaluator=FakeEvaluator(half))


def test_the_default_dtype_a_study_records_on_an_amx_cpu(monkeypatch, eval_data):
    # With bfloat16 products in hardware a study runs bfloat16, a likelihood judge's too (a pair's two sides are
    # read alike: tests/evaluate/test_answers_shared.py); an asked dtype is kept as asked.
    import torch

    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    assert _problem(None).dtype_named().dtype == "bfloat16"
    likelihood = dataclasses.replace(_problem(str(eval_data)), tasks=("longctx_squad:likelihood",))
    assert likelihood.dtype_named().dtype == "bfloat16"
    assert dataclasses.replace(likelihood, dtype="float32").dtype_named().dtype == "float32"
    assert dataclasses.replace(_problem(None), device="cuda").dtype_named().dtype == "bfloat16"
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    assert _problem(None).dtype_named().dtype == "float32"


@pytest.mark.parametrize("tasks", [("piqa",), ("passkey",)])
def test_a_study_stored_before_lm_evals_items_kept_their_index_is_read_never_resumed(tmp_path, tasks):
    # Before schema 2 an lm-eval task's items asked out of order came back under each other's indices (paired
    # right within a round, not across rounds): such a study is refused in one line, a study of the embedded
    # tasks (scored by poptune itself) resumes as before.
    import optuna

    from poptune.store.attributes import SCHEMA_ATTR

    url = f"sqlite:///{tmp_path}/s.db"
    problem = dataclasses.replace(_problem(str(tmp_path) if tasks == ("piqa",) else None), tasks=tasks)
    study = run_study(StudySpec(problem=problem, trials=2, storage=url), evaluator=FakeEvaluator(problem))
    assert store.StoredStudy.of(study).schema == 2
    optuna.load_study(study_name=study.study_name, storage=url).set_user_attr(SCHEMA_ATTR, 1)
    resume = StudySpec(problem=problem, add=1, storage=url)
    if tasks == ("piqa",):
        with pytest.raises(ConfigError, match=r"stored by an older poptune whose per-item outcomes on piqa .* "
                                              r"can be read, not resumed; use another --study name"):
            run_study(resume, evaluator=FakeEvaluator(problem))
    else:
        assert len(store.completed(run_study(resume, evaluator=FakeEvaluator(problem)))) >= 3
