"""The one reader of stored trials: what each key means, and its default for trials stored before it."""

from __future__ import annotations

import optuna
import pytest

from poptune import store
from poptune.engine import PopConfig
from poptune.interval import Interval

optuna.logging.set_verbosity(optuna.logging.WARNING)

_LATENCY = {"16": {"full_ms": 10.0, "pop_ms": 5.0, "speedup": 2.0, "speedup_lo": 1.9, "speedup_hi": 2.1, "ideal": 2.5,
                   "pairs": 6}}


def _attrs(**extra):
    return {"config": {"skip": 2, "boundary": "last", "offset": 0}, "target_length": 16, "latency": _LATENCY,
            "speedup": 2.0, "drop_points": 0.5, "accuracy": {"piqa": 0.7}, "full_accuracy": {"piqa": 0.705},
            "accuracy_mean": 0.7, **extra}


def _study(*attrs):
    study = optuna.create_study(directions=["minimize", "maximize"])
    for a in attrs:
        study.add_trial(optuna.trial.create_trial(values=[5.0, 0.7], user_attrs=a))
    return study


def test_a_trial_stored_before_methods_intervals_and_items_reads_with_their_defaults():
    (trial,) = map(store.StoredTrial.of, store.completed(_study(_attrs())))
    assert trial.method == "pop" and trial.is_pop and trial.measured and trial.feasible and not trial.noisy
    assert trial.config == PopConfig(skip=2, boundary="last", offset=0)
    assert trial.speedup_ci is None and trial.drop_ci is None and trial.items is None
    assert trial.target_row["ideal"] == 2.5 and trial.values == (5.0, 0.7)


def test_every_field_is_read_once_and_the_measurement_comes_back():
    attrs = _attrs(method="sleb", speedup_ci=[1.9, 2.1], drop={"mean": 0.5, "lo": -0.1, "hi": 1.2},
                   items={"piqa": 8}, noisy=True, reused_from=3, details={"ratio": 0.33})
    study = _study(attrs)
    assert store.completed(study) == []  # a baseline is not POP's
    (trial,) = map(store.StoredTrial.of, store.completed(study, method=None))
    assert (trial.method, trial.items) == ("sleb", 8)
    assert trial.speedup_ci == Interval(trial.speedup, 1.9, 2.1) and trial.drop_ci == Interval(0.5, -0.1, 1.2)
    assert trial.noisy and trial.reused_from == 3 and not trial.measured and trial.details["ratio"] == 0.33
    measurement = trial.measurement()
    assert measurement.method == "sleb" and measurement.latency[16]["speedup"] == 2.0
    assert trial.info() == attrs and trial.info() is not study.trials[0].user_attrs


def test_the_latency_objective_is_the_reference_over_the_speedup():
    assert store.latency_objective(100.0, 2.0) == pytest.approx(50.0)
