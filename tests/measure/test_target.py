"""The model resolved once at the command's edge and passed down: the study fingerprints its hardware once."""

from __future__ import annotations

import optuna
import pytest

from poptune import store
from poptune.env import TuningProblem
from poptune.errors import ConfigError, ModelNotFoundError
from poptune.measure.target import ResolvedTarget
from poptune.models import ResolvedModel, resolve_model, weights_fingerprint
from poptune.tune.study import StudySpec, run_study, study_name_of

from ..tune.fakes import FakeEvaluator, quiet_timing  # noqa: F401  (the fixture is autouse)

optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_a_resolved_model_names_what_the_name_resolves_to_and_fingerprints_once(monkeypatch):
    model = ResolvedModel.of("tiny-llama")
    assert (model.name, model.source, model.requested) == (resolve_model("tiny-llama").name, "tiny", "tiny-llama")
    calls = []
    monkeypatch.setattr("poptune.models.resolved.weights_fingerprint",
                        lambda *a: calls.append(a) or weights_fingerprint(*a))
    assert model.weights_fingerprint == model.weights_fingerprint == weights_fingerprint("tiny-llama")
    assert calls == [("tiny-llama", "pretrained")]
    with pytest.raises(ModelNotFoundError, match="unknown model 'nope'"):
        ResolvedModel.of("nope")


def test_a_study_fingerprints_its_hardware_once_and_records_the_target(tmp_path, monkeypatch):
    import poptune.measure.target as target_module

    calls = []
    real = target_module.fingerprint
    monkeypatch.setattr(target_module, "fingerprint", lambda device: calls.append(device) or real(device))
    problem = TuningProblem(model="tiny-llama", tasks=("piqa",), lengths=(16,), decode_tokens=8, max_drop=None)
    spec = StudySpec(problem=problem, trials=3, sampler="grid", storage=f"sqlite:///{tmp_path}/s.db")
    target = ResolvedTarget.of("tiny-llama")
    study = run_study(spec, evaluator=FakeEvaluator(problem), target=target)
    stored = store.StoredStudy.of(study)
    assert calls == ["cpu"]  # the study's name, its record, its resumption check: one fingerprint
    assert study.study_name == study_name_of(spec, target) == f"tiny-llama@{target.hardware_id}"
    assert (stored.model, stored.weights_fingerprint) == (target.model.name, target.model.weights_fingerprint)
    assert stored.hardware == target.hardware.to_dict()


def test_a_target_of_another_problem_is_refused(tmp_path):
    problem = TuningProblem(model="tiny-llama", tasks=("piqa",), lengths=(16,), max_drop=None)
    spec = StudySpec(problem=problem, trials=1, storage=f"sqlite:///{tmp_path}/s.db")
    with pytest.raises(ConfigError, match="is not its problem's"):
        run_study(spec, evaluator=FakeEvaluator(problem), target=ResolvedTarget.of("tiny-llama", weights="random"))
    assert not (tmp_path / "s.db").exists()  # refused before the storage is touched
