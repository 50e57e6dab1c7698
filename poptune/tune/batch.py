"""Trials in batches: ask Optuna for several configurations, race their accuracy together, tell them back.

A study's trial measures a configuration's latency (timing pairs against the full model, per configuration) and
its accuracy (a race over the workload's items, paired with the full model's outcomes). Every configuration
races on the same items in the same order, so a batch of trials can score them together: one pass per batch of
items serves every configuration still racing (:meth:`poptune.problem.evaluator.ConfigEvaluator.race_together`:
the full model's recorded layer inputs replayed, the greedy decodes stacked), and each race stops where it would
have stopped alone, outcome for outcome. On this project's 2-core CPU a batch's races cost 1.2-1.6x less and its
search is 1.0-1.09x shorter (``leaderboards/batch-trials-*``): a decode step of many rows costs more than one of few
there. On a GPU it costs about what one of few does, which is what batches are for (unmeasured: no GPU lent
since). :mod:`poptune.tune.study` sizes each step (the structured sampler batches once its front holds a
candidate).

:func:`run_batch` is ``study.optimize(objective, n_trials=K)`` with the races run first:

1. ``K`` trials are asked (each a running trial with a heartbeat, its parameters and ``config`` written at once,
   so the structured and grid samplers propose ``K`` distinct configurations; TPE may repeat one, which is then
   answered from storage as in a sequential study);
2. the configurations the study has not measured are raced together (an out-of-memory error there only sends
   each trial to race alone);
3. each trial's objective then runs in number order (its latency pairs, its accuracy taken from the race) and is
   told, and the callbacks see it, as ``optimize`` would.

A trial that never ran its objective when the batch stops on an error or a signal is failed with
``fail_reason = "interrupted"`` and its configuration queued again, as an interrupted trial is
(:mod:`poptune.tune.interrupt`).
"""

from __future__ import annotations

import contextlib
import logging
import time
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from poptune.engine import PopConfig
from poptune.errors import MeasurementError
from poptune.tune.interrupt import INTERRUPTED, mark_interrupted
from poptune.tune.objective import (
    TrialFailed,
    config_of,
    fail_stale,
    free_accelerator_memory,
    one_configurations_fault,
)
from poptune.tune.params import suggest_config

if TYPE_CHECKING:
    import optuna

__all__ = ["run_batch", "unmeasured"]

log = logging.getLogger(__name__)


def unmeasured(study: "optuna.Study", configs: Sequence[PopConfig], num_layers: int,
               batch: Sequence[int] = ()) -> list[PopConfig]:
    """Of ``configs``, the POP configurations (distinct, in order) that no trial of ``study`` completed or failed
    measuring (an interrupted trial measured nothing) and no running trial outside ``batch`` (trial numbers)
    measures (another worker's: the batch's trial is answered from it): those a batch races."""
    from optuna.trial import TrialState

    from poptune.store.trials import fail_reason

    settled = {config_of(t, num_layers) for t in study.get_trials(deepcopy=False)
               if t.state == TrialState.COMPLETE
               or (t.state == TrialState.FAIL and fail_reason(t) not in (None, INTERRUPTED))
               or (t.state == TrialState.RUNNING and t.number not in batch)}
    return [c for c in dict.fromkeys(configs) if c.skip > 0 and c not in settled]


def run_batch(study: "optuna.Study", objective: Callable[["optuna.Trial"], Any], size: int, *,
              race: Callable[[list[PopConfig]], None], num_layers: int, kv: tuple[str, ...],
              callbacks: Sequence[Callable[..., None]] = ()) -> list[int]:
    """Ask ``size`` trials, ``race`` the accuracy of their unmeasured configurations together, then run and tell
    each (module docstring); returns the trials' storage ids. ``objective`` is the study's (it suggests the same
    parameters again and finds its race's result waiting); an exception it raises other than ``TrialFailed``
    or ``TrialPruned`` fails its trial and stops the batch, as it stops ``optimize``."""
    from optuna.storages._heartbeat import get_heartbeat_thread, is_heartbeat_enabled

    if is_heartbeat_enabled(study._storage):
        fail_stale(study)  # as optimize does before it asks: a killed worker's trials are retried
    trials: list["optuna.Trial"] = []
    beats: dict[int, Any] = {}  # each trial's heartbeat, from its ask until it is told
    try:
        configs = []
        for _ in range(size):
            with warnings.catch_warnings():  # Optuna warns that heartbeats serve `optimize`: these beat too
                warnings.simplefilter("ignore", UserWarning)
                trial = study.ask()
            trials.append(trial)
            beats[trial._trial_id] = beat = get_heartbeat_thread(trial._trial_id, study._storage)
            beat.start()  # as optimize's ``with`` does for its one trial
            config = suggest_config(trial, num_layers, kv)
            trial.set_user_attr("config", config.to_dict())  # written before the next is asked
            configs.append(config)
        began = time.monotonic()
        raced = _race(race, unmeasured(study, configs, num_layers, [t.number for t in trials]))
        share = (time.monotonic() - began) / max(len(raced), 1)
        shares = dict.fromkeys(raced, share)  # each raced configuration's part of the race
        for trial, config in zip(trials, configs):
            _run_one(study, objective, trial, callbacks, shares.pop(config, 0.0))
            beats.pop(trial._trial_id).join()
    except BaseException:
        for trial in trials:
            if trial._trial_id in beats:  # not told: failed as interrupted, queued again
                beats.pop(trial._trial_id).join()
                _requeue(study, trial)
        raise
    return [t._trial_id for t in trials]


def _race(race: Callable[[list[PopConfig]], None], configs: list[PopConfig]) -> list[PopConfig]:
    """``race(configs)`` where there are two or more; returns those raced (none: each trial races alone, as after a
    memory error)."""
    if len(configs) < 2:
        return []
    try:
        race(configs)
    except (MemoryError, MeasurementError, RuntimeError) as e:  # torch.OutOfMemoryError is a RuntimeError
        if not one_configurations_fault(e):
            raise
        free_accelerator_memory()
        log.warning("racing %d configurations together failed (%s): each trial races alone", len(configs), e)
        return []
    return configs


def _run_one(study: "optuna.Study", objective: Callable[["optuna.Trial"], Any], trial: "optuna.Trial",
             callbacks: Sequence[Callable[..., None]], share: float) -> None:
    """Run one asked trial's objective and tell it, as ``optimize`` runs a trial. A completed trial's user
    attribute ``seconds`` is its own time: its objective's and ``share`` of the batch's race (its start, when it
    was asked, is the batch's)."""
    import optuna
    from optuna.study._tell import _tell_with_warning
    from optuna.trial import TrialState

    values, state = None, None
    started = time.monotonic()
    try:
        values = objective(trial)
        trial.set_user_attr("seconds", round(time.monotonic() - started + share, 3))
    except optuna.TrialPruned:
        state = TrialState.PRUNED
    except TrialFailed as e:
        state = TrialState.FAIL
        log.warning("trial %d failed: %s", trial.number, e)
    except BaseException:  # a fault or a signal: the trial fails, the batch stops
        _tell_with_warning(study, trial, None, TrialState.FAIL, skip_if_finished=True, suppress_warning=True)
        raise
    outcome, _, warning = _tell_with_warning(study, trial, values, state, skip_if_finished=True,
                                             suppress_warning=True)
    if warning is not None:
        log.warning("trial %d failed: %s", trial.number, warning)
    if outcome != TrialState.COMPLETE:
        log.info("trial %d ended %s", trial.number, outcome.name)
    frozen = study._storage.get_trial(trial._trial_id)
    for callback in callbacks:
        callback(study, frozen)


def _requeue(study: "optuna.Study", trial: "optuna.Trial") -> None:
    """Fail a trial of the batch that did not run to its end as interrupted, its configuration queued again (an
    interrupted trial says nothing of its configuration); a trial already told stays as it is."""
    from optuna.trial import TrialState

    with contextlib.suppress(Exception):  # the storage may be what is failing; the trial is then failed stale
        if study._storage.get_trial(trial._trial_id).state != TrialState.RUNNING:
            return
        mark_interrupted(study, trial)
        study.tell(trial, state=TrialState.FAIL)
