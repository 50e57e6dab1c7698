"""Two workers drawing one configuration measure it once: a trial waits for every earlier-numbered trial still
running on it, and for one that has not yet written what it measures (the race the journal harness once caught: the
earlier-numbered trial wrote its configuration second, and both measured it)."""

from __future__ import annotations

import threading

import optuna
import pytest

from poptune.engine import PopConfig
from poptune.tune import objective

NUM_LAYERS = 8
CONFIG = PopConfig(skip=3, boundary="window-64")


@pytest.fixture
def study(monkeypatch):
    monkeypatch.setattr(objective, "POLL_S", 0.01)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(directions=["minimize", "maximize"])


def _settle_in_thread(study, trial, config):
    """``_settled`` for ``trial`` in a thread; its answer lands in the returned dict."""
    trial.set_user_attr("config", config.to_dict())
    result: dict = {}
    thread = threading.Thread(target=lambda: result.setdefault(
        "settled", objective._settled(study, trial.number, config, NUM_LAYERS)), daemon=True)
    thread.start()
    return thread, result


def test_a_trial_waits_for_an_earlier_one_that_has_not_said_what_it_measures(study):
    first, second = study.ask(), study.ask()
    thread, result = _settle_in_thread(study, second, CONFIG)
    thread.join(0.3)
    assert thread.is_alive()  # the earlier trial may be drawing the same configuration: it is waited for
    first.set_user_attr("config", CONFIG.to_dict())
    thread.join(0.3)
    assert thread.is_alive()  # it measures the same: wait for its answer
    study.tell(first, [1.0, 0.5])
    thread.join(30)
    assert result["settled"].number == first.number  # answered from storage, not measured twice


def test_a_trial_measures_once_the_earlier_one_names_another_configuration(study):
    first, second = study.ask(), study.ask()
    thread, result = _settle_in_thread(study, second, CONFIG)
    first.set_user_attr("config", PopConfig(skip=4, boundary="window-64").to_dict())
    thread.join(30)
    assert not thread.is_alive() and result["settled"] is None


def test_the_earlier_trial_never_waits_for_a_later_one(study):
    first, second = study.ask(), study.ask()
    second.set_user_attr("config", CONFIG.to_dict())
    thread, result = _settle_in_thread(study, first, CONFIG)
    thread.join(30)
    assert not thread.is_alive() and result["settled"] is None  # it measures; the later one waits for it
