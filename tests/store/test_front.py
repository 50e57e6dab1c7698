"""A front row's figures are its values by name: the study's objectives as its trial returned them, every other
objective read from the trial's measurement against the study's references, a confirmation or certification
revising only the objectives whose reading it changes."""

from __future__ import annotations

import optuna
import pytest

from poptune.engine import PopConfig
from poptune.objectives import registry
from poptune.store.attributes import StoredStudy
from poptune.store.front import FrontRow
from poptune.store.measurement import Measurement

optuna.logging.set_verbosity(optuna.logging.WARNING)

OBJECTIVES = ("ttft", "accuracy")


def _study() -> optuna.Study:
    """A study of TTFT and accuracy with one trial whose measurement also gives decode and K/V figures."""
    study = optuna.create_study(directions=registry.directions(OBJECTIVES))
    study.set_user_attr("reference_prefill_ms", 90.0)  # the attribute names every study has stored them under
    study.set_user_attr("reference_tpot_ms", 9.0)
    latency = {512: {"pop_ms": 80.0, "full_ms": 100.0, "speedup": 1.25, "ideal": 1.3, "decode_full_ms_per_token": 10.0,
                     "decode_pop_ms_per_token": 8.0, "decode_speedup": 1.2, "kv_bytes": 3 * 2 ** 20}}
    m = Measurement(config=PopConfig(6, "last"), latency=latency, target_length=512, accuracy={"passkey": 0.75},
                    full_accuracy={"passkey": 0.8})
    values = registry.values_of(OBJECTIVES, m, StoredStudy.of(study).references)
    study.add_trial(optuna.trial.create_trial(values=list(values), user_attrs=m.info()))
    return study


def test_a_row_gives_every_objective_its_measurement_gives_by_name():
    study = _study()
    refs = StoredStudy.of(study).references
    row = FrontRow.from_trial(study.trials[0], None, refs, OBJECTIVES)
    assert row.values == pytest.approx({"ttft": 90.0 / 1.25, "accuracy": 0.75, "tpot": 9.0 / 1.2,
                                        "kv_bytes": 3 * 2 ** 20})
    assert row.values["ttft"] == study.trials[0].values[0]  # the study's objectives: as the trial returned them
    assert (row.prefill_ms, row.accuracy) == (row.values["ttft"], row.values["accuracy"])


def test_a_confirmation_and_a_certification_revise_what_they_measured_anew():
    study = _study()
    refs = StoredStudy.of(study).references
    row = FrontRow.from_trial(study.trials[0], None, refs, OBJECTIVES)
    confirmed = FrontRow.from_trial(study.trials[0], {"speedup": 1.5, "speedup_lo": 1.4, "speedup_hi": 1.6,
                                                      "pairs": 12}, refs, OBJECTIVES)
    assert confirmed.confirmed and confirmed.speedup == 1.5
    assert confirmed.values == {**row.values, "ttft": pytest.approx(90.0 / 1.5)}  # only the timing re-measured
    certified = FrontRow.from_trial(study.trials[0], None, refs, OBJECTIVES, revised={"objective_accuracy": 0.7})
    assert certified.values == {**row.values, "accuracy": 0.7}


def test_a_trial_stored_without_a_whole_measurement_keeps_its_values():
    study = optuna.create_study(directions=registry.directions(OBJECTIVES))
    study.add_trial(optuna.trial.create_trial(values=[5.0, 0.7], user_attrs={
        "config": {"skip": 2, "boundary": "last", "offset": 0}, "speedup": 2.0, "drop_points": 0.5}))
    row = FrontRow.from_trial(study.trials[0], None, StoredStudy.of(study).references, OBJECTIVES)
    assert row.values == {"ttft": 5.0, "accuracy": 0.7} and row.prefill_ms == 5.0
