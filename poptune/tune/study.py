"""The Optuna study: POP's configuration space searched for real, per model and per machine.

Objectives (:mod:`poptune.objectives`, the problem's ``objectives``): by default two, minimise POP's prefill
latency at the target prompt length (``ttft``), maximise mean task accuracy (``accuracy``); ``tpot`` (time per
output token at the target context) and ``kv_bytes`` (the K/V cache of a request at the target length) may join
them. The latency objective is the study's reference full-model latency (its first measurement) divided by the
trial's speedup, itself the median of POP/full pairs timed side by side: comparable across trials however busy
the machine was (raw p50 latencies are kept as trial attributes).
Search space (:mod:`poptune.problem.space`): ``skip`` in [0, L-1], 0 being the full model with no other
parameter; for ``skip > 0`` also ``offset`` in [0, min(2, L-1-skip)] and ``boundary`` in
:data:`poptune.boundary.registry.NAMES`: one point per configuration, parameters equal to what ran. The full model
and the paper's rule (``skip = round(L/3)``, ``boundary=last``) are enqueued first. A configuration already
measured in the study is answered from storage, not re-run (TPE re-suggests points of small discrete spaces),
and such an answer does not use up the budget: the budget counts measured configurations. With ``max_drop``
every trial carries the constraint ``drop - max_drop <= 0``.

Trust in the latency (:mod:`poptune.measure.nullcheck`): each trial's pairs run until the speedup's interval
is +-2% (within the problem's caps); each study run times an A/A pair (full against full) at its start and end
(study attribute ``null_checks``). A trial whose decode pairs (identical work) exclude 1 +- 3%, or whose
speedup is above the FLOPs ideal by more than its interval, is marked ``noisy``, left out of the front, and
timed again at the end of the run, its accuracy kept (a new trial with ``remeasure_of``); the full model's own
trial is an A/A pair and is checked the same way. Then a confirmation pass re-times the
front's configurations together, interleaved round by round, with more pairs; the front is recomputed from
those figures (study attribute ``confirmation``, read by :func:`poptune.store.front.front`).

One study per ``<model>@<hardware-id>`` in the storage; running the same command again resumes it. Several
workers (processes, machines) may run the same study on one shared storage (PostgreSQL, a journal file):

- **Budget.** The study stops at a number of *completed* trials, however many workers share it: a worker only
  starts a trial while completed plus running trials are below it, and a trial that finds the budget already
  taken by trials numbered before it is pruned unmeasured. So a study ends with exactly its budget of
  completed trials, and a trial that fails or whose worker is killed is replaced.
- **No double measurement.** A configuration being measured by an earlier-numbered running trial is not
  measured again: the later trial waits for it and is answered from storage. Each trial's parameters are
  written before it looks, so of two workers that pick one configuration at once, the later one always sees
  the earlier one. The full model and the paper's rule are enqueued once, by the worker that creates the
  study.
- **Faults.** A trial whose measurement runs out of memory or is not finite fails with its reason in the user
  attribute ``fail_reason``; the study goes on, and a configuration that failed so is not measured again (a
  re-suggestion fails at once). A killed worker's trial goes stale, is failed and retried (heartbeats, see
  :mod:`poptune.store.shared`).

Baselines (:mod:`poptune.baselines`) are measured by the same evaluator and stored in the same study as trials
with a ``method`` user attribute and no search parameters (:func:`add_baselines`), by default at the pruning
ratios of POP's front and the paper's rule (``skip / L``); readers filter by method
(:func:`poptune.store.trials.completed`), and the trial budget counts POP's trials only.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from poptune import progress, store
from poptune.baselines.methods import METHODS
from poptune.engine import PopConfig
from poptune.errors import ConfigError
from poptune.kvfit.calibration import CalibrationSpec
from poptune.objectives import registry as objectives
from poptune.problem.evaluator import ConfigEvaluator
from poptune.problem.presets import STANDARD
from poptune.problem.problem import TuningProblem
from poptune.problem.space import all_configs, check_enqueue, paper_default
from poptune.store.trials import is_answer
from poptune.tune import trust
from poptune.tune.baseline_trials import add_baselines, front_ratios
from poptune.tune.batch import run_batch
from poptune.tune.certify import CLOSING_S, candidates, certify_front, check_follow_up, wants_certification
from poptune.tune.interrupt import marking_interrupted, requeue_lost
from poptune.tune.objective import POLL_S, TrialFailed, config_of, count, fail_stale, make_objective, store_full_run
from poptune.tune.params import params_of
from poptune.tune.resume import check_problem
from poptune.tune.samplers import DEFAULT_SAMPLER, SAMPLERS, make_sampler

if TYPE_CHECKING:
    import optuna

    from poptune.measure.target import ResolvedTarget

__all__ = [
    "SAMPLERS", "StudySpec", "run_study", "study_name_of", "target_of", "make_sampler", "add_baselines", "front_ratios",
]

log = logging.getLogger(__name__)

#: The share of a ``time_budget`` after which the search starts no more trials: the rest is the certification's.
SEARCH_SHARE = 0.6

#: The closing checks of a run (the confirmation pass and the closing A/A check), in opening A/A checks: what a
#: time budget keeps for them however the search goes (measured 4.6 min against 1.4 on ``cpu-amd-epyc-2t``).
CLOSING_CHECKS = 3.0


@dataclass(frozen=True)
class StudySpec:
    """A study to run.

    Attributes:
        problem: What each trial measures.
        trials: The study's total of measured configurations: a run stops once the study holds this many, so
            the same spec run again finishes at once (workers sharing a study stop together).
        add: Measure ``add`` configurations more than the study holds instead (``trials`` is then ignored).
        timeout: Stop starting trials after this many seconds.
        sampler: ``structured`` (default: :mod:`poptune.tune.structured`, the search that uses POP's order;
            it beat TPE, NSGA-II, random search and GP on the real grid's replay, ``leaderboards/tuner-*``),
            ``tpe`` (seeded), ``nsga2``, ``random`` or ``grid``.
        storage: Storage URL (default ``sqlite:///studies/poptune.db``).
        study: Study name (default ``<model>@<hardware-id>``).
        seed: Sampler seed (on a journal or database storage, mixed with each worker's process id).
        enqueue: Configurations to measure first, after the full model and the paper's rule.
        heartbeat_s: Seconds between trial heartbeats; a trial silent for three is failed and retried.
        baselines: Baseline methods measured after the search (Wanda at 30%) at ``baseline_ratios``, by default
            the ratios of POP's front and the paper's rule.
        calibration: Calibration text of the baselines.
        reuse_states: Replay the layers before the skipped block from the full model's stored states when
            scoring accuracy (:mod:`poptune.engine.prefix`; checked against the plain prefill at the start).
        confirm: After this run's trials, re-time noisy trials, run the confirmation pass and time the A/A
            pairs (:mod:`poptune.tune.trust`); workers sharing a server storage leave it to a later single run.
        sole_worker: This process is the study's only worker, though its storage could be shared (a grid's
            journal file): the trust checks run as on SQLite, and the sampler's seed is not mixed with the
            process.
        time_budget: Seconds the run may take, from its start to its verdict: once :data:`SEARCH_SHARE` of it is
            spent and the front holds a candidate, the search starts no more trials; it starts none, candidate or
            not, once the full model and the paper's rule are measured and a trial as long as its trials so far
            would leave less than the closing checks need (:data:`CLOSING_CHECKS` opening A/A checks); a planned
            certification spends at most what is left (None: no clock).
        plan_certification: Size the certification from the search's flip rate and the time left, within the
            problem's cap (:func:`poptune.tune.certify.plan_certification`); False: certify on the cap.
        remember_answers: Read and store the full model's outcomes in the answers file beside a file storage
            (:mod:`poptune.store.answers`); ``forget_answers``: clear that file first.
        batch: Trials asked at once, their accuracy raced together (:mod:`poptune.tune.batch`): the same
            measurements, the items of a batch scored in one pass for all its configurations; the sampler
            proposes each batch from the trials told before it. 1: one trial at a time.
    """

    problem: TuningProblem
    trials: int = STANDARD.trials
    add: int | None = None
    timeout: float | None = None
    sampler: str = DEFAULT_SAMPLER
    storage: str | None = None
    study: str | None = None
    seed: int = 0
    enqueue: tuple[PopConfig, ...] = field(default_factory=tuple)
    heartbeat_s: int = store.HEARTBEAT_S
    baselines: tuple[str, ...] = ()
    reuse_states: bool = True
    baseline_ratios: tuple[float, ...] | None = None
    calibration: CalibrationSpec = field(default_factory=CalibrationSpec)
    confirm: bool = True
    sole_worker: bool = False
    time_budget: float | None = None
    plan_certification: bool = False
    remember_answers: bool = True
    forget_answers: bool = False
    batch: int = 1

    @property
    def shared(self) -> bool:
        """Whether other workers may run this study at the same time (a shared storage, not a sole worker)."""
        return not self.sole_worker and store.is_server(self.storage)

    def __post_init__(self) -> None:
        if isinstance(self.trials, bool) or not isinstance(self.trials, int) or self.trials < 0:
            raise ConfigError(f"`trials` must be a positive integer, got {self.trials!r}")
        if self.trials == 0 and not self.baselines and self.add is None:
            raise ConfigError("`trials` must be a positive integer, got 0 (0 only adds --baselines to a study)")
        unknown = [m for m in self.baselines if m not in METHODS]
        if unknown:
            raise ConfigError(f"unknown baseline(s) {', '.join(unknown)}: use {', '.join(METHODS)}")
        if self.add is not None and (isinstance(self.add, bool) or not isinstance(self.add, int) or self.add < 1):
            raise ConfigError(f"`add` must be a positive integer, got {self.add!r}")
        if self.time_budget is not None and not self.time_budget > 0:
            raise ConfigError(f"`time_budget` must be positive seconds, got {self.time_budget}")
        if self.timeout is not None and self.timeout <= 0:
            raise ConfigError(f"`timeout` must be positive seconds, got {self.timeout}")
        if isinstance(self.batch, bool) or not isinstance(self.batch, int) or self.batch < 1:
            raise ConfigError(f"`batch` must be a positive integer of trials, got {self.batch!r}")
        if isinstance(self.heartbeat_s, bool) or not isinstance(self.heartbeat_s, int) or self.heartbeat_s < 1:
            raise ConfigError(f"`heartbeat_s` must be a positive integer, got {self.heartbeat_s!r}")
        if self.sampler not in SAMPLERS:
            raise ConfigError(f"`sampler` must be one of {', '.join(SAMPLERS)}, got {self.sampler!r}")
        from poptune.tune.structured import reads  # imports optuna: on use, not when this module is imported

        if self.sampler == "structured" and not reads(self.problem.objectives):
            raise ConfigError("the structured sampler searches by TTFT and accuracy: give both in --objectives (any "
                              "others beside them), or another --sampler (tpe, nsga2, random, grid)")
        store.check_study_name(self.study)
        store.check_url(self.storage)


def _record_problem(
    study: "optuna.Study", problem: TuningProblem, num_layers: int, target: "ResolvedTarget", target_length: int
) -> None:
    stored = store.StoredStudy.of(study)
    if not stored.recorded:
        import optuna

        from poptune.files import typed_path
        from poptune.measure.provenance import versions

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(objectives.metric_names(problem.objectives, problem.target_label))
        paths = {k: typed_path(v) for k in ("data_dir", "prompts") if (v := getattr(problem, k)) is not None}
        stored.record_problem(dict(problem.to_dict(), **paths),  # as typed: no path of this machine in a record
                              target_length=target_length, model=target.model.name,
                              weights_fingerprint=target.model.weights_fingerprint, num_layers=num_layers,
                              hardware=target.hardware.to_dict(), versions=versions())


def _sampler_seed(spec: StudySpec) -> int:
    """``spec.seed``; on a storage shared by several workers, mixed with this process so that they differ.

    Workers seeded alike would all propose the same configurations (TPE starts with seeded random samples)
    and then mostly wait for each other.
    """
    if not spec.shared:
        return spec.seed
    import hashlib
    import os
    import socket

    mixed = hashlib.sha256(f"{spec.seed}/{socket.gethostname()}/{os.getpid()}".encode()).digest()
    return int.from_bytes(mixed[:4], "little")


def _open_study(spec: StudySpec, storage: Any, name: str, num_layers: int) -> tuple["optuna.Study", bool]:
    """Create the study, or load it when it exists (another worker may create it at the same moment); a loaded
    study gets back what an interrupted trial lost (:func:`~poptune.tune.interrupt.requeue_lost`: a full-model
    trial interrupted before it was queued again like any other)."""
    import optuna

    sampler = make_sampler(spec.sampler, _sampler_seed(spec), num_layers, spec.problem.kv,
                           max_drop=spec.problem.max_drop, objectives=spec.problem.objectives)
    kwargs = dict(study_name=name, storage=storage, sampler=sampler)
    try:
        return optuna.create_study(directions=objectives.directions(spec.problem.objectives), **kwargs), True
    except optuna.exceptions.DuplicatedStudyError:
        study = optuna.load_study(**kwargs)
    requeue_lost(study)
    return study, False


def _work(study: "optuna.Study", objective: Callable[..., Any], spec: StudySpec, budget: int,
          callbacks: list[Callable[..., None]] | None, stop_by: float | None = None,
          last_end: float | None = None, evaluator: ConfigEvaluator | None = None) -> None:
    """Run trials until the study holds ``budget`` completed ones (or the timeout, or ``stop_by``, a
    ``time.monotonic()`` after which no trial starts once the front holds a candidate, or ``last_end``, by which
    the search must be done: no trial starts that would end after it as long as this worker's trials took, once two
    are complete; or too many failures); ``spec.batch`` at a time where it may (:func:`_batch_size`,
    :mod:`poptune.tune.batch`)."""
    import random

    from optuna.trial import TrialState

    started = time.monotonic()
    share = max(budget - count(study, TrialState.COMPLETE), 1)
    attempts = failures = answered = 0
    took: list[float] = []  # seconds of each trial this worker ran
    rng = random.Random(spec.seed)
    ran: list[int] = []  # the trial this worker runs (its storage id)

    def run(trial: "optuna.Trial") -> Any:
        ran.append(trial._trial_id)
        return objective(trial)

    while count(study, TrialState.COMPLETE) < budget:
        if spec.timeout is not None and time.monotonic() - started >= spec.timeout:
            return
        if stop_by is not None and time.monotonic() >= stop_by and candidates(study, spec.problem.max_drop, 1):
            progress.note(f"search stopped at {count(study, TrialState.COMPLETE)} of {budget} configurations: "
                          f"{100 * SEARCH_SHARE:.0f}% of the time budget is spent and the front has a candidate, "
                          "the rest certifies it (--time-budget, or --add N later)")
            return
        if (last_end is not None and count(study, TrialState.COMPLETE) >= min(2, budget)
                and time.monotonic() + (sum(took) / len(took) if took else 0.0) >= last_end):
            progress.note(f"search stopped at {count(study, TrialState.COMPLETE)} of {budget} configurations: the "
                          "time budget is spent (another trial would leave the closing checks no time), "
                          "candidate or not (--time-budget, or --add N later)")
            return
        if failures >= share + store.MAX_RETRY or attempts >= 4 * share + 20:
            log.warning("stopping after %d trials, %d of which failed", attempts, failures)
            return
        if count(study, TrialState.COMPLETE, TrialState.RUNNING) >= budget:
            # Other workers run the last trials; wait in case one fails (or its worker dies) and needs a successor.
            fail_stale(study)
            time.sleep(POLL_S)
            continue
        ran.clear()
        began = time.monotonic()
        size = _batch_size(study, spec, budget, evaluator, took, last_end)
        if size > 1:
            assert evaluator is not None  # a batch races on the study's own evaluator
            ran.extend(run_batch(study, objective, size, race=evaluator.race_together, num_layers=evaluator.num_layers,
                                 kv=spec.problem.kv, callbacks=callbacks or ()))
        else:
            try:
                study.optimize(run, n_trials=1, callbacks=callbacks, catch=(TrialFailed,), gc_after_trial=False)
            except (ValueError, AssertionError):  # Optuna cannot tell a trial another worker failed as stale while
                # this one ran it: ValueError, or its "Should not reach" assertion for a trial whose objective returned
                if not ran or study._storage.get_trial(ran[-1]).state != TrialState.FAIL:
                    raise
                log.warning("this worker's trial was failed as stale by another worker while it ran (its heartbeats "
                            "lapsed: a loaded machine?); its retry measures the configuration again")
        attempts += size
        took.extend([(time.monotonic() - began) / size] * size)
        done = [study._storage.get_trial(i) for i in ran] if size > 1 else \
            [max(study.get_trials(deepcopy=False), key=lambda t: t.number)]  # optimize's trial: the study's last
        for last in sorted(done, key=lambda t: t.number):
            failures += last.state == TrialState.FAIL
            answered = answered + 1 if is_answer(last) else 0
        if answered >= 2:  # the sampler keeps proposing measured points: give it an unmeasured one
            _enqueue_unmeasured(study, rng)
            answered = 0


def _batch_size(study: "optuna.Study", spec: StudySpec, budget: int, evaluator: ConfigEvaluator | None,
                took: list[float], last_end: float | None) -> int:
    """Trials the next step asks at once: ``spec.batch``, within the budget still open and the time left before
    ``last_end`` at this worker's seconds per trial; one until this process has scored the full model and one
    configuration beside it alone (the cost per item a certification's plan prices), and, with the structured
    sampler, until the front holds a candidate: its budget search is a bisection, each proposal placed by the
    answers before it (a first batch of four proposed from two answers spent all four on hopeless blocks and
    left the default study of 8 trials without a candidate: ``leaderboards/batch-trials-*``)."""
    from optuna.trial import TrialState

    if spec.batch == 1 or evaluator is None or evaluator.seconds_per_item() is None:
        return 1
    if spec.sampler == "structured" and not candidates(study, spec.problem.max_drop, 1):
        return 1
    size = min(spec.batch, budget - count(study, TrialState.COMPLETE, TrialState.RUNNING))
    if last_end is not None and took:
        size = min(size, int((last_end - time.monotonic()) / (sum(took) / len(took))))
    return max(size, 1)


def _enqueue_unmeasured(study: "optuna.Study", rng: Any) -> None:
    """Enqueue a random configuration no trial of the study has (none when the space is exhausted)."""
    stored = store.StoredStudy.of(study)
    num_layers, kv = stored.num_layers, TuningProblem.from_dict(stored.problem).kv
    taken = {config_of(t, num_layers) for t in study.get_trials(deepcopy=False)}
    free = [c for c in all_configs(num_layers, kv) if c not in taken]
    if free:
        study.enqueue_trial(params_of(rng.choice(free), kv))


def run_study(
    spec: StudySpec,
    *,
    evaluator: ConfigEvaluator | None = None,
    callbacks: list[Callable[..., None]] | None = None,
    started: Callable[[int, int], None] | None = None,
    target: "ResolvedTarget | None" = None,
) -> "optuna.Study":
    """Run (or resume, or join) the study of ``spec.problem`` on this machine and return it.

    Every check (storage, model, enqueued configurations, the settings of a stored study) runs before anything
    is written to the storage. A study that already holds ``spec.trials`` measured configurations (and every
    baseline asked for) is returned at once, without loading the model. Work is reported in phases
    (:mod:`poptune.progress`).

    Args:
        spec: The study.
        evaluator: Share a loaded model (default: one built from the problem).
        callbacks: Optuna callbacks ``(study, trial)`` run after each of this worker's trials (progress bars).
        started: Called with the study's measured configurations and its budget once every check has passed
            and the study is open, before any measurement (a command opens its progress bars there, so that an
            error is the first line it prints).
        target: The problem's model resolved and its machine, made once at the command's edge (default: made
            here); an unknown model fails before the storage is touched.
    """
    import contextlib
    from dataclasses import replace

    spec = replace(spec, problem=spec.problem.dtype_named())
    target = target_of(spec, target)
    with contextlib.ExitStack() as held:
        return _run_study(spec, held, target, evaluator=evaluator, callbacks=callbacks, started=started)


def target_of(spec: StudySpec, target: "ResolvedTarget | None" = None) -> "ResolvedTarget":
    """``target``, checked to be ``spec``'s problem's; else its problem's model resolved on its device.

    Raises:
        ConfigError: an unknown model, or a target of another model, weights or device than the problem's.
    """
    from poptune.measure.target import ResolvedTarget

    p = spec.problem
    if target is None:
        return ResolvedTarget.of(p.model, weights=p.weights, device=p.device)
    if not target.matches(p.model, p.weights, p.device):
        raise ConfigError(f"the study's target ({target.model.requested}, {target.model.weights}, {target.device}) "
                          f"is not its problem's ({p.model}, {p.weights}, {p.device})")
    return target


def study_name_of(spec: StudySpec, target: "ResolvedTarget | None" = None) -> str:
    """The study ``spec`` runs: ``spec.study``, else ``<model>@<hardware-id>`` of this machine (``target``:
    the problem's, made once, see :func:`target_of`)."""
    if spec.study:
        return spec.study
    target = target_of(spec, target)
    return store.study_name(target.model.name, target.hardware_id)


def _complete_already(spec: StudySpec, target: "ResolvedTarget") -> "optuna.Study | None":
    """The stored study when it already holds what ``spec`` asks for (its trials, no baseline to add).

    A stored study's enqueued configurations are checked against its model here, before the model loads, and a
    complete study says that they wait (issue 87: they were not even checked)."""
    import optuna
    from optuna.trial import TrialState

    try:
        storage = store.open_reader(spec.storage)
    except ConfigError:  # no database yet
        return None
    name = study_name_of(spec, target)
    if name not in store.study_names(storage):
        return None
    study = optuna.load_study(study_name=name, storage=storage)
    check_problem(study, spec.problem)
    layers = study.user_attrs.get("num_layers")  # recorded with the problem
    if spec.enqueue and isinstance(layers, int):
        check_enqueue(spec.enqueue, layers, spec.problem.kv)
    if spec.add is not None or spec.baselines:
        return None
    if spec.confirm and not spec.shared and wants_certification(study, spec.problem):
        return None  # measured, but asked to certify on more fresh items than it holds
    if spec.confirm and not spec.shared and not spec.plan_certification:
        check_follow_up(study, spec.problem)  # --certify N within the positions the attempts took: one line
    if count(study, TrialState.COMPLETE) < spec.trials:
        return None
    if spec.enqueue:
        log.warning("poptune: study %s already holds its %d trials: the configurations of --enqueue are not "
                    "measured; raise --trials or use --add to measure them", study.study_name, spec.trials)
    return study


def _run_study(
    spec: StudySpec,
    held: Any,
    target: "ResolvedTarget",
    *,
    evaluator: ConfigEvaluator | None,
    callbacks: list[Callable[..., None]] | None,
    started: Callable[[int, int], None] | None,
) -> "optuna.Study":
    import optuna
    from optuna.trial import TrialState

    began = trust.now()
    deadline = None if spec.time_budget is None else time.monotonic() + spec.time_budget
    problem = spec.problem
    _check_files(spec)  # a file that is not ours fails before the model loads (nothing created)
    # A second worker on one SQLite file is refused in one line, before its model loads (and, for a new file,
    # once the file exists).
    locked = held.enter_context(store.sole_sqlite_worker(spec.storage))
    finished = _complete_already(spec, target)
    if finished is not None:
        return finished
    if evaluator is None:  # the study's own (one handed in is the caller's, as it is)
        evaluator = ConfigEvaluator(problem)
        _answers(evaluator, spec)
    num_layers = evaluator.num_layers
    check_enqueue(spec.enqueue, num_layers, problem.kv)
    target_length = evaluator.target_length  # an image prompt for a text-only model fails here, before any write
    storage = store.open_storage(spec.storage, heartbeat=spec.heartbeat_s)
    if not locked:
        held.enter_context(store.sole_sqlite_worker(spec.storage))
    name = study_name_of(spec, target)
    if name in store.study_names(storage):
        check_problem(optuna.load_study(study_name=name, storage=storage), problem)
    study, created = _open_study(spec, storage, name, num_layers)
    if created or not study.get_trials(deepcopy=False):  # once per study, not once per worker
        for config in (PopConfig(skip=0), paper_default(num_layers)):  # the full model, then the paper's rule
            study.enqueue_trial(params_of(config, problem.kv), skip_if_exists=True)
    for config in spec.enqueue:
        config.check(num_layers)
        study.enqueue_trial(params_of(config, problem.kv), skip_if_exists=True)
    _record_problem(study, problem, num_layers, target, target_length)
    done = count(study, TrialState.COMPLETE)
    budget = done + spec.add if spec.add is not None else spec.trials
    _note_plan(study, spec, budget - done)
    if started is not None:
        started(done, budget)
    _prepare(study, evaluator, spec)
    checks = spec.confirm and not spec.shared and budget > done
    trust.record_run(study, evaluator, began)
    check_s = 0.0  # the opening A/A check's seconds: the closing checks are timed alike
    if checks:
        opened = time.monotonic()
        trust.record_aa_check(study, evaluator, "start")
        check_s = time.monotonic() - opened
    if budget > done:
        stop_by = last_end = None
        if deadline is not None and spec.time_budget is not None:  # a deadline comes of a time budget
            stop_by, last_end = deadline - (1 - SEARCH_SHARE) * spec.time_budget, deadline - CLOSING_CHECKS * check_s
        _work(study, marking_interrupted(study, make_objective(study, evaluator, problem, budget)), spec, budget,
              callbacks, stop_by, last_end, evaluator)
    _finish(study, evaluator, spec, checks, deadline, check_s)
    return study


def _note_plan(study: "optuna.Study", spec: StudySpec, more: int) -> None:
    """Say what a run will not do as asked (issue 57): another sampler than the study's so far proposes from here
    on; enqueued configurations beyond the budget wait for a later run."""
    from optuna.trial import TrialState

    previous = study.user_attrs.get("sampler")
    if previous is not None and previous != spec.sampler:
        log.warning("poptune: study %s was searched by the %s sampler so far; from here on %s proposes its "
                    "configurations", study.study_name, previous, spec.sampler)
    if previous != spec.sampler and not spec.shared:
        study.set_user_attr("sampler", spec.sampler)
    waiting = count(study, TrialState.WAITING)
    if waiting > max(more, 0):
        log.warning("poptune: %d enqueued configurations wait and this run measures %d more: %d of them (the last "
                    "enqueued) are not measured now; raise --trials to measure them", waiting, max(more, 0),
                    waiting - max(more, 0))


def _check_files(spec: StudySpec) -> None:
    """The storage's file and the full model's answers beside it, checked before anything loads or is written."""
    from poptune.store.answers import answers_path, check_answers_file

    store.check_storage(spec.storage)
    path = answers_path(spec.storage or store.DEFAULT_STORAGE)
    if path is not None and (spec.remember_answers or spec.forget_answers):
        check_answers_file(path)


def _answers(evaluator: ConfigEvaluator, spec: StudySpec) -> None:
    """The full model's answers remembered beside a file storage (and forgotten first, if asked)."""
    from poptune.store.answers import FullAnswers, answers_path

    path = answers_path(spec.storage or store.DEFAULT_STORAGE)
    if path is None:
        return
    if spec.forget_answers:
        log.warning("poptune: forgot %d remembered full-model answers in %s", FullAnswers(path, {}).clear(), path)
    if spec.remember_answers:
        evaluator.remember_answers(path)


def _finish(study: "optuna.Study", evaluator: ConfigEvaluator, spec: StudySpec, checks: bool,
            deadline: float | None = None, check_s: float = 0.0) -> None:
    """After the trials: the trust checks (re-measures, confirmation, the closing A/A), the baselines, the run's end.
    A planned certification ends before ``deadline`` by the opening A/A check's ``check_s`` where longer than
    :data:`~poptune.tune.certify.CLOSING_S`: the closing check takes about what the opening one took."""
    if deadline is not None:
        deadline -= max(0.0, check_s - CLOSING_S)
    if checks:
        trust.remeasure_noisy(study, evaluator)
        trust.confirm_front(study, evaluator)
        certify_front(study, evaluator, planned=spec.plan_certification, deadline=deadline)
        if trust.record_aa_check(study, evaluator, "end")["noisy"]:
            trust.retime_certified(study, evaluator)
    elif spec.confirm and not spec.shared and wants_certification(study, spec.problem):
        # nothing to measure, more fresh items asked for (--certify N)
        certify_front(study, evaluator, planned=spec.plan_certification, deadline=deadline)
    if spec.baselines:
        ratios = list(spec.baseline_ratios) if spec.baseline_ratios else None
        add_baselines(study, evaluator, spec.baselines, ratios=ratios, calibration=spec.calibration)
    trust.finish_run(study)


def _prepare(study: "optuna.Study", evaluator: ConfigEvaluator, spec: StudySpec) -> None:
    """State reuse checked and on; the full model's stored outcomes restored, or its reference measured."""
    stored = store.StoredStudy.of(study)
    if spec.reuse_states and spec.problem.image is None and evaluator.states is None and spec.problem.runtime == "hf":
        stored.set_state_reuse_check(evaluator.enable_state_reuse())
    full_run = stored.full_run
    if full_run:
        evaluator.restore_full_run(full_run)
    if stored.full_accuracy is None:
        stored.record_full(evaluator.full_accuracy(), evaluator.workload.to_dict(), evaluator.latency_points())
        if spec.problem.prompts is not None:  # hashes and lengths, never the text (unless --store-prompts)
            from poptune.evaluate.prompts import PROMPT_TASKS, prompt_record

            w = evaluator.workload
            task = next(t for t in PROMPT_TASKS if t in w.order)
            stored.set_prompts(prompt_record(evaluator.tokenizer, spec.problem.prompts, w.order[task],
                                             w.tokens[task], w.skipped.get(task, 0),
                                             store_text=spec.problem.store_prompts))
            null = evaluator.null_reference()  # once per study: POP's change rate is read beside it
            if null is not None:
                stored.set_prompts_null(null)
        store_full_run(study, evaluator)
