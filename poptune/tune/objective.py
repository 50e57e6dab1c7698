"""One trial of the study: settle its configuration (answered from storage, or measured), then its objectives.

A configuration already measured in the study is answered from storage; one being measured by an
earlier-numbered trial is waited for (as is an earlier-numbered trial that has not yet written what it measures);
one that failed before fails again at once. Its values are the problem's objectives
(:mod:`poptune.objectives.registry`); the latency objectives are the study's reference full-model figures over the
paired speedups, the reference being the full-model trial's, or the first measurement's paired full model
(:func:`settle_reference`).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from poptune import progress, store
from poptune.engine import PopConfig
from poptune.errors import MeasurementError
from poptune.kv import registry as kv_registry
from poptune.objectives.base import References
from poptune.objectives.registry import new_references, values_of
from poptune.problem.evaluator import ConfigEvaluator
from poptune.problem.problem import TuningProblem
from poptune.store.measurement import Measurement
from poptune.store.trials import StoredTrial, fail_reason, is_pop, measures, stored_config
from poptune.tune.interrupt import INTERRUPTED
from poptune.tune.params import config_of_trial, distributions_of, params_of, suggest_config

if TYPE_CHECKING:
    import optuna

__all__ = [
    "POLL_S", "TrialFailed", "add_finished_trial", "count", "fail_stale", "free_accelerator_memory",
    "make_objective", "one_configurations_fault", "outcome",
    "settle_reference", "store_full_run",
]

#: Seconds between looks at the study while a worker waits for other workers' trials.
POLL_S = 0.5

#: A memory error of one configuration (on a GPU, or the CPU allocator's) fails that trial only.
_OOM_TEXT = ("out of memory", "can't allocate memory")


class TrialFailed(Exception):
    """A configuration that could not be measured: the trial fails with the reason, the study goes on."""


def config_of(trial: "optuna.trial.FrozenTrial", num_layers: int) -> PopConfig | None:
    """The configuration of a POP trial in any state (None: a baseline's, or parameters not written yet)."""
    if not is_pop(trial):
        return None
    return config_of_trial(trial, num_layers)


def count(study: "optuna.Study", *states: "optuna.trial.TrialState") -> int:
    """POP's measuring trials in ``states`` (baselines, answers from storage and re-measures use no budget)."""
    return sum(measures(t) for t in study.get_trials(deepcopy=False, states=states))


def fail_stale(study: "optuna.Study") -> None:
    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


def _over_budget(study: "optuna.Study", number: int, budget: int) -> bool:
    """Whether completed trials and those numbered before ``number`` still to finish already fill ``budget``.

    Of any two trials the later-numbered one counts the earlier one, so at most ``budget`` trials pass.
    """
    from optuna.trial import TrialState

    ahead = [t for t in study.get_trials(deepcopy=False) if measures(t) and (t.state == TrialState.COMPLETE
             or (t.state in (TrialState.RUNNING, TrialState.WAITING) and t.number < number))]
    return len(ahead) >= budget


def _settled(study: "optuna.Study", number: int, config: PopConfig, num_layers: int) -> Any:
    """A trial that settles ``config``: completed (answer from it), or failed measuring it (fail too).

    Waits while an earlier-numbered trial is measuring the same configuration, or has not yet written which one it
    measures (every trial writes it before it looks here: otherwise two workers drawing one configuration, the
    earlier-numbered writing it second, would both measure it); None when this trial must measure it.
    """
    from optuna.trial import TrialState

    while True:
        others = [t for t in study.get_trials(deepcopy=False) if t.number != number]
        same = [t for t in others if t.state in (TrialState.COMPLETE, TrialState.FAIL)
                and config_of(t, num_layers) == config]
        for state in (TrialState.COMPLETE, TrialState.FAIL):
            done = [t for t in same if t.state == state and (state == TrialState.COMPLETE or fail_reason(t) not in (
                None, INTERRUPTED))]  # an interrupted trial says nothing of its config
            if done:
                return min(done, key=lambda t: t.number)
        earlier = [t for t in others if t.state == TrialState.RUNNING and t.number < number and is_pop(t)]
        if not any(stored_config(t) in (config, None) for t in earlier):
            return None
        fail_stale(study)  # the earlier trial's worker may have been killed
        time.sleep(POLL_S)


def _references(study: "optuna.Study", number: int, measurement: Measurement, num_layers: int) -> References:
    """The study's reference full-model figures: the full-model trial's, written once by that trial.

    A trial finishing while an earlier-numbered trial measures the full model waits for it; otherwise the trial's
    own paired full-model latency becomes the reference (as for the first trial of a study made without it). A
    full-model trial that waits in the queue, or is numbered after this one, is never waited for: the one process
    that would run it may be this one (a full-model trial queued again after a signal or a killed worker is
    numbered after the trials queued before it), and of any two trials only the later-numbered one waits.
    """
    from optuna.trial import TrialState

    full = PopConfig(skip=0)
    while True:
        if store.reference_ms(study) is not None:
            return settle_reference(study, measurement)  # written: read (a study's TPOT reference it lacks, written)
        pending = [t for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
                   if t.number < number and (config_of(t, num_layers) == full or
                                             t.system_attrs.get("fixed_params", {}).get("skip") == 0)]
        if measurement.config == full or not pending:
            return settle_reference(study, measurement)
        fail_stale(study)
        time.sleep(POLL_S)


def settle_reference(study: "optuna.Study", measurement: Measurement) -> References:
    """The study's reference full-model figures (:class:`~poptune.objectives.base.References`); each one it has
    not yet, ``measurement``'s paired full model's where it gives one, written as the study's (a study's first
    measurement, or the first baseline of a study of baselines only:
    :func:`poptune.objectives.registry.new_references`)."""
    stored = store.StoredStudy.of(study)
    for name, value in new_references(stored.references, measurement).items():
        stored.set_reference(name, value)
    return stored.references


def _measure(evaluator: ConfigEvaluator, trial: "optuna.Trial", config: PopConfig) -> Measurement:
    """Measure ``config``; an out-of-memory error or a non-finite result fails this trial only."""
    label = config.label
    try:
        with progress.phase(f"trial {trial.number} ({label})", unit="step"):
            return evaluator.evaluate(config)
    except (MemoryError, RuntimeError, MeasurementError) as e:  # torch.OutOfMemoryError is a RuntimeError
        if not one_configurations_fault(e):
            raise
        reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        free_accelerator_memory()
        trial.set_user_attr("fail_reason", reason)
        raise TrialFailed(reason) from e


def one_configurations_fault(error: Exception) -> bool:
    """Whether ``error`` (a ``MemoryError``, ``RuntimeError`` or ``MeasurementError``) is one configuration's
    measurement failing (out of memory, a non-finite result), not the study's."""
    return isinstance(error, (MemoryError, MeasurementError)) or any(s in str(error) for s in _OOM_TEXT)


def free_accelerator_memory() -> None:
    """The accelerator's cached memory freed after a measurement ran out of it."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def make_objective(
    study: "optuna.Study", evaluator: ConfigEvaluator, problem: TuningProblem, budget: int
) -> Callable[..., Any]:
    import optuna

    num_layers = evaluator.num_layers

    def objective(trial: "optuna.Trial") -> tuple[float, ...]:
        config = suggest_config(trial, num_layers, problem.kv)
        trial.set_user_attr("config", config.to_dict())  # what it measures, written before it looks at the others
        if _over_budget(study, trial.number, budget):
            raise optuna.TrialPruned("the study's budget is taken by other workers' trials")
        previous = _settled(study, trial.number, config, num_layers)
        if previous is not None and previous.state == optuna.trial.TrialState.FAIL:
            reason = f"failed before in trial {previous.number}: {fail_reason(previous)}"
            trial.set_user_attr("fail_reason", reason)
            raise TrialFailed(reason)
        if previous is not None:
            answer = StoredTrial.of(previous)
            info = dict(answer.info(), reused_from=previous.number)
            measurement = answer.measurement()
        else:
            measurement = _measure(evaluator, trial, config)
            info = measurement.info()
            store_full_run(study, evaluator)
        references = _references(study, trial.number, measurement, num_layers)
        values, info, constraint = outcome(measurement, info, problem, references)
        info["noisy"] = measurement.noisy  # not ranked; timed again at the end of the run
        if constraint is not None:
            trial.set_constraint("max_drop", constraint)
        for key, value in info.items():
            trial.set_user_attr(key, value)
        return values

    return objective


def store_full_run(study: "optuna.Study", evaluator: ConfigEvaluator) -> None:
    """Keep the full model's per-item outcomes with the study once they grew (a resumed study reuses them)."""
    stored = evaluator.stored_full_run()
    if stored is not None and stored != store.StoredStudy.of(study).full_run:
        store.StoredStudy.of(study).set_full_run(stored)


def outcome(measurement: Measurement, info: dict[str, Any], problem: TuningProblem,
            references: References) -> tuple[tuple[float, ...], dict[str, Any], float | None]:
    """A measurement's objective values (the problem's objectives in order, read against the study's
    ``references``: :func:`poptune.objectives.registry.values_of`), user attributes and accuracy constraint (None
    without a budget).

    The latency objectives are the study's reference full-model figures over this measurement's paired speedups.
    A speedup is measured side by side and survives load on a shared machine; a raw latency would rank trials by
    how busy the machine was when they ran. The raw p50s stay in the user attributes.
    """
    # The search only rejects: a configuration stays feasible until its drop's lower end is beyond the budget.
    # Whether one is within the budget is decided after the search on fresh items (poptune.tune.certify).
    lower = measurement.drop_lower
    constraint = None
    if problem.max_drop is not None:
        info["feasible"] = lower <= problem.max_drop
        constraint = lower - problem.max_drop
    return values_of(problem.objectives, measurement, references), info, constraint


def add_finished_trial(study: "optuna.Study", values: tuple[float, ...], info: dict[str, Any],
                       constraint: float | None, *, config: PopConfig | None = None, num_layers: int = 0,
                       kv: tuple[str, ...] = (kv_registry.DEFAULT,)) -> None:
    """Store a measurement made outside ``optimize`` as a completed trial (with ``config``: with its search
    parameters, a re-measure's; without: none, a baseline's), its accuracy constraint where there is a budget."""
    import optuna
    from optuna.samplers._base import _CONSTRAINTS_KEY

    system = {} if constraint is None else {_CONSTRAINTS_KEY: (constraint,)}
    space: dict[str, Any] = {}
    if config is not None:
        space = {"params": params_of(config, kv), "distributions": distributions_of(config, num_layers, kv)}
    with warnings.catch_warnings():  # Optuna warns that heartbeats serve `optimize`: this trial has none
        warnings.simplefilter("ignore", UserWarning)
        study.add_trial(optuna.trial.create_trial(**space, values=list(values), user_attrs=info, system_attrs=system))
