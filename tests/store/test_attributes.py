"""The one reader and writer of a study's attributes: its schema version, and old studies read as before."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from poptune import store
from poptune.errors import ConfigError
from poptune.problem.problem import TuningProblem
from poptune.store.attributes import SCHEMA_ATTR, SCHEMA_VERSION, StoredStudy, migrate

optuna.logging.set_verbosity(optuna.logging.WARNING)

ROOT = Path(__file__).resolve().parents[2]

#: A problem as a study stored it before calibrated K/V and certification (no `kv`, no `certify_*`).
_OLD_PROBLEM = {"model": "tiny-llama", "tasks": ["piqa"], "lengths": [16], "target_length": None, "limit": 8,
                "data_dir": None, "max_drop": 1.5, "device": "cpu", "dtype": None, "weights": "pretrained",
                "batch_size": 1, "repeats": 3, "precision": 0.02, "max_pairs": 20, "max_seconds": 3.0,
                "decode_tokens": 4, "seed": 0, "eval_batch_size": 8, "image": None, "items_start": 4,
                "halfwidth": 2.0, "latency_points": 0}


def _old_study() -> optuna.Study:
    study = optuna.create_study(directions=["minimize", "maximize"])
    attrs = {"problem": _OLD_PROBLEM, "model": "tiny-llama", "num_layers": 6, "hardware": {"hardware_id": "x"},
             "full_accuracy": {"piqa": 0.75}, "reference_prefill_ms": 10.0}
    for key, value in attrs.items():
        study.set_user_attr(key, value)
    return study


def test_an_old_study_without_a_schema_version_reads_as_it_did():
    study = _old_study()
    stored = StoredStudy.of(study)
    assert stored.schema == 0 and stored.recorded
    assert stored.kv == ("own",) and stored.problem["kv"] == ["own"]  # before calibrated K/V: the paper's space
    assert stored.stored_problem == _OLD_PROBLEM  # migrated in memory, never in the storage
    assert SCHEMA_ATTR not in study.user_attrs and "kv" not in study.user_attrs["problem"]
    problem = TuningProblem.from_dict(stored.problem)
    assert problem.kv == ("own",) and problem.certify_limit == TuningProblem().certify_limit
    assert TuningProblem.from_dict(_OLD_PROBLEM) == problem  # a problem lacking a field: its default
    assert (stored.num_layers, stored.model, stored.hardware_id, stored.reference_ms) == (6, "tiny-llama", "x", 10.0)
    assert stored.timed_length == 16  # no `target_length` stored: the problem's first length
    assert stored.runs == [] and stored.null_checks == [] and stored.confirmations == {}
    assert stored.certification is None and stored.full_run is None and stored.full_accuracy == {"piqa": 0.75}
    assert dict(stored.references) == {"ttft": 10.0}  # keyed by objective, read from the attribute stored before


def test_references_are_keyed_by_objective_and_stored_under_the_names_older_studies_used():
    study = _old_study()
    study.set_user_attr("reference_tpot_ms", 2.5)  # a study of the tpot objective, stored before the keying
    stored = StoredStudy.of(study)
    assert dict(stored.references) == {"ttft": 10.0, "tpot": 2.5}
    stored.set_reference("tpot", 3.0)  # written under the name studies have always used
    assert study.user_attrs["reference_tpot_ms"] == 3.0 and StoredStudy.of(study).references["tpot"] == 3.0
    study.set_user_attr("reference_accuracy", 0.5)  # not a reference: accuracy is read without one
    assert "accuracy" not in StoredStudy.of(study).references


def test_a_new_study_records_the_schema_version_and_reads_back_what_it_wrote():
    study = optuna.create_study(directions=["minimize", "maximize"])
    stored = StoredStudy.of(study)
    assert not stored.recorded
    stored.record_problem(TuningProblem(model="tiny-llama").to_dict(), target_length=512, model="tiny-llama",
                          weights_fingerprint="w", num_layers=6, hardware={"hardware_id": "h"}, versions={"torch": "2"})
    stored.add_run({"started": "a"})
    stored.set_runs([dict(stored.runs[-1], finished="b")])
    stored.add_null_check({"when": "start"})
    stored.set_confirmation({"trials": {"3": {"speedup": 1.2}}})
    stored.record_full({"piqa": 0.5}, {"items": {}}, [(512, 1.0)])
    assert study.user_attrs[SCHEMA_ATTR] == SCHEMA_VERSION == stored.schema
    assert stored.timed_length == 512 and stored.runs == [{"started": "a", "finished": "b"}]
    assert stored.null_checks == [{"when": "start"}] and store.confirmations(study) == {"3": {"speedup": 1.2}}
    assert stored.latency_points == [[512, 1.0]] and stored.attrs() == migrate(study.user_attrs)


def test_a_study_of_a_newer_schema_is_refused_in_one_line():
    study = _old_study()
    study.set_user_attr(SCHEMA_ATTR, SCHEMA_VERSION + 1)
    with pytest.raises(ConfigError, match="newer than this poptune"):
        _ = StoredStudy.of(study).problem


def test_the_committed_grid_study_is_an_old_study_and_reads():
    journal = ROOT / "leaderboards" / "raw" / "grid-gemma-3-270m-cpu-amd-epyc-2t.journal"
    stored = StoredStudy.of(store.read_study(f"journal:{journal}", None))
    assert stored.schema == 0 and stored.num_layers == 18 and stored.kv == ("own",)
    assert stored.hardware_id == "cpu-amd-epyc-2t" and stored.timed_length == 1152 and len(stored.runs) >= 1
    fake = ROOT / "tests" / "reports" / "golden" / "fake-study.journal"  # written at ca4c9a0, before the schema
    assert StoredStudy.of(store.read_study(f"journal:{fake}", None)).schema == 0
