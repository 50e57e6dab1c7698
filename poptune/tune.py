"""The Optuna study: POP's configuration space searched for real, per model and per machine.

Two objectives: minimise POP's prefill latency at the target prompt length, maximise mean task accuracy. The
latency objective is the study's reference full-model latency (its first measurement) divided by the trial's
speedup, itself the median of POP/full pairs timed side by side: comparable across trials however busy the
machine was (raw p50 latencies are kept as trial attributes).
Search space: ``skip`` in [0, L-1] (0 is the full model, so it can be enqueued as a trial), ``boundary`` in
:data:`~poptune.engine.BOUNDARIES`, ``offset`` in [0, 2] (``skip`` clipped so that ``skip + offset <= L-1``).
The full model and the paper's rule (``skip = round(L/3)``, ``boundary=last``) are enqueued first. A
configuration already measured in the study is answered from storage, not re-run (TPE re-suggests points of
small discrete spaces). With ``max_drop`` every trial carries the constraint ``drop - max_drop <= 0``.

One study per ``<model>@<hardware-id>`` in the storage; running the same command again resumes it.

Baselines (:mod:`poptune.baselines`) are measured by the same evaluator and stored in the same study as trials
with a ``method`` user attribute and no search parameters (:func:`add_baselines`), by default at the pruning
ratios of POP's front (``skip / L``); readers filter by method (:func:`poptune.store.completed`).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from poptune import store
from poptune.baselines.calibration import CalibrationSpec
from poptune.baselines.methods import METHODS, WANDA_SPARSITY
from poptune.engine import BOUNDARIES, PopConfig
from poptune.env.evaluator import ConfigEvaluator
from poptune.env.problem import MAX_OFFSET, Measurement, TuningProblem, config_from_action
from poptune.errors import ConfigError

if TYPE_CHECKING:
    import optuna

__all__ = ["SAMPLERS", "StudySpec", "run_study", "make_sampler", "paper_default", "add_baselines", "front_ratios"]

log = logging.getLogger(__name__)

SAMPLERS = ("tpe", "nsga2", "random", "grid")


def paper_default(num_layers: int) -> PopConfig:
    """The paper's fixed rule: skip the last third of the layers in prefill, boundary handling on."""
    return PopConfig(skip=round(num_layers / 3), boundary="last")


@dataclass(frozen=True)
class StudySpec:
    """A study to run.

    Attributes:
        problem: What each trial measures.
        trials: Trials to run in this invocation (a resumed study grows by this many).
        timeout: Stop starting trials after this many seconds.
        sampler: ``tpe`` (seeded, default), ``nsga2``, ``random`` or ``grid``.
        storage: Storage URL (default ``sqlite:///studies/poptune.db``).
        study: Study name (default ``<model>@<hardware-id>``).
        seed: Sampler seed.
        enqueue: Configurations to measure first, after the full model and the paper's rule.
        heartbeat_s: Seconds between trial heartbeats; a trial silent for three is failed and retried.
        baselines: Baseline methods measured after the search (Wanda at 30%) at ``baseline_ratios``, by default
            the ratios of POP's front and the paper's rule.
        calibration: Calibration text of the baselines.
    """

    problem: TuningProblem
    trials: int = 16
    timeout: float | None = None
    sampler: str = "tpe"
    storage: str | None = None
    study: str | None = None
    seed: int = 0
    enqueue: tuple[PopConfig, ...] = field(default_factory=tuple)
    heartbeat_s: int = store.HEARTBEAT_S
    baselines: tuple[str, ...] = ()
    baseline_ratios: tuple[float, ...] | None = None
    calibration: CalibrationSpec = field(default_factory=CalibrationSpec)

    def __post_init__(self) -> None:
        if isinstance(self.trials, bool) or not isinstance(self.trials, int) or self.trials < 0:
            raise ConfigError(f"`trials` must be a positive integer, got {self.trials!r}")
        if self.trials == 0 and not self.baselines:
            raise ConfigError("`trials` must be a positive integer, got 0 (0 only adds --baselines to a study)")
        unknown = [m for m in self.baselines if m not in METHODS]
        if unknown:
            raise ConfigError(f"unknown baseline(s) {', '.join(unknown)}: use {', '.join(METHODS)}")
        if self.timeout is not None and self.timeout <= 0:
            raise ConfigError(f"`timeout` must be positive seconds, got {self.timeout}")
        if isinstance(self.heartbeat_s, bool) or not isinstance(self.heartbeat_s, int) or self.heartbeat_s < 1:
            raise ConfigError(f"`heartbeat_s` must be a positive integer, got {self.heartbeat_s!r}")
        if self.sampler not in SAMPLERS:
            raise ConfigError(f"`sampler` must be one of {', '.join(SAMPLERS)}, got {self.sampler!r}")


def make_sampler(name: str, seed: int, num_layers: int) -> "optuna.samplers.BaseSampler":
    """A seeded sampler; the accuracy budget reaches TPE and NSGA-II through ``trial.set_constraint``."""
    import optuna

    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    space = {"skip": list(range(num_layers)), "boundary": list(BOUNDARIES), "offset": list(range(MAX_OFFSET + 1))}
    return optuna.samplers.GridSampler(space, seed=seed)


def _check_problem(study: "optuna.Study", problem: TuningProblem) -> None:
    """Refuse to mix other settings into an existing study (before anything is written to it)."""
    stored = study.user_attrs.get("problem")
    if stored is not None and TuningProblem.from_dict(stored) != problem:
        changed = sorted(k for k, v in TuningProblem.from_dict(stored).to_dict().items() if problem.to_dict()[k] != v)
        raise ConfigError(
            f"study {study.study_name!r} was made with other settings ({', '.join(changed)}): "
            "use the same options to resume it, or another --study name"
        )


def _record_problem(
    study: "optuna.Study", problem: TuningProblem, num_layers: int, hardware: dict[str, Any], target_length: int
) -> None:
    if "problem" not in study.user_attrs:
        import optuna

        from poptune.measure.bench import versions
        from poptune.models import resolve_model, weights_fingerprint

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names([f"prefill_ms@{problem.target_label}", "accuracy"])
        study.set_user_attr("problem", problem.to_dict())  # with `image` for an image-prompt study
        study.set_user_attr("target_length", target_length)  # prompt tokens timed (an image prompt's, all told)
        study.set_user_attr("model", resolve_model(problem.model).name)
        study.set_user_attr("weights_fingerprint", weights_fingerprint(problem.model, problem.weights))
        study.set_user_attr("num_layers", num_layers)
        study.set_user_attr("hardware", hardware)
        study.set_user_attr("versions", versions())


def _measured(study: "optuna.Study") -> dict[PopConfig, "optuna.trial.FrozenTrial"]:
    found: dict[PopConfig, Any] = {}
    for trial in store.completed(study):
        found.setdefault(PopConfig.from_dict(trial.user_attrs["config"]), trial)
    return found


def _objective(study: "optuna.Study", evaluator: ConfigEvaluator, problem: TuningProblem) -> Callable[..., Any]:
    num_layers = evaluator.num_layers

    def objective(trial: "optuna.Trial") -> tuple[float, float]:
        action = {
            "skip": trial.suggest_int("skip", 0, num_layers - 1),
            "boundary": trial.suggest_categorical("boundary", list(BOUNDARIES)),
            "offset": trial.suggest_int("offset", 0, MAX_OFFSET),
        }
        config = config_from_action(action, num_layers)
        previous = _measured(study).get(config)
        if previous is not None:
            info = dict(previous.user_attrs, reused_from=previous.number)
            measurement = Measurement.from_info(previous.user_attrs)
        else:
            measurement = evaluator.evaluate(config)
            info = measurement.info()
        values, info, constraint = _outcome(study, measurement, info, problem)
        if constraint is not None:
            trial.set_constraint("max_drop", constraint)
        for key, value in info.items():
            trial.set_user_attr(key, value)
        return values

    return objective


def _outcome(study: "optuna.Study", measurement: Measurement, info: dict[str, Any],
             problem: TuningProblem) -> tuple[tuple[float, float], dict[str, Any], float | None]:
    """A measurement's objective values, user attributes and accuracy constraint (None without a budget)."""
    drop = measurement.drop_points
    constraint = None
    if problem.max_drop is not None:
        info["feasible"] = drop <= problem.max_drop
        constraint = drop - problem.max_drop
    # Latency objective: the study's reference full-model latency over this trial's paired speedup. The
    # speedup is measured side by side and survives load on a shared machine; a raw latency would rank
    # trials by how busy the machine was when they ran. The raw p50s stay in the user attributes.
    reference = study.user_attrs.get("reference_prefill_ms")
    if reference is None:
        reference = float(measurement.latency[measurement.target_length]["full_ms"])
        study.set_user_attr("reference_prefill_ms", reference)
    return (reference / measurement.speedup, measurement.accuracy_mean), info, constraint


def front_ratios(study: "optuna.Study", num_layers: int) -> list[float]:
    """The pruning ratios ``skip / L`` of POP's stored front (skip > 0) and of the paper's rule, smallest first."""
    skips = {row.skip for row in store.front(study) if row.skip} | {paper_default(num_layers).skip}
    return sorted(skip / num_layers for skip in skips)


def add_baselines(
    study: "optuna.Study",
    evaluator: ConfigEvaluator,
    methods: tuple[str, ...],
    *,
    ratios: list[float] | None = None,
    calibration: CalibrationSpec | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[Measurement]:
    """Measure baselines into ``study`` (default: the ratios of POP's front and paper rule; Wanda at 30%).

    A method already stored at the same number of layers (Wanda: the same sparsity) is not measured again.
    Returns the new measurements.
    """
    import optuna
    from optuna.samplers._base import _CONSTRAINTS_KEY

    from poptune.baselines.methods import build_baseline

    problem = evaluator.problem
    num_layers = evaluator.num_layers
    ratios = front_ratios(study, num_layers) if ratios is None else ratios
    done = set()
    for trial in store.completed(study, method=None):
        method = trial.user_attrs.get("method", "pop")
        if method != "pop":
            done.add((method, _amount(method, trial.user_attrs["details"]["ratio"], num_layers)))
    measured = []
    memo: dict[str, Any] = {}
    for method in methods:
        for ratio in [WANDA_SPARSITY] if method == "wanda" else sorted(ratios, reverse=True):
            key = (method, _amount(method, ratio, num_layers))
            if key in done:
                continue
            if progress:
                progress(f"{method} at ratio {ratio:.3f}")
            measurement = evaluator.evaluate_baseline(
                build_baseline(evaluator.model, evaluator.tokenizer, method, ratio, calibration, progress=progress,
                               memo=memo))
            values, info, constraint = _outcome(study, measurement, measurement.info(), problem)
            system = {} if constraint is None else {_CONSTRAINTS_KEY: (constraint,)}
            study.add_trial(optuna.trial.create_trial(values=list(values), user_attrs=info, system_attrs=system))
            done.add(key)
            measured.append(measurement)
    return measured


def _amount(method: str, ratio: float, num_layers: int) -> float:
    """What identifies a baseline at a ratio: layers removed (Wanda: its sparsity)."""
    return round(ratio, 4) if method == "wanda" else round(ratio * num_layers)


def run_study(
    spec: StudySpec,
    *,
    evaluator: ConfigEvaluator | None = None,
    callbacks: list[Callable[..., None]] | None = None,
    progress: Callable[[str], None] | None = None,
) -> "optuna.Study":
    """Run (or resume) the study of ``spec.problem`` on this machine and return it.

    Args:
        spec: The study.
        evaluator: Share a loaded model (default: one built from the problem).
        callbacks: Optuna callbacks ``(study, trial)`` run after each trial (progress bars).
        progress: Called with a short label as baselines are built and measured.
    """
    import optuna

    from poptune.measure.hardware import fingerprint
    from poptune.models import resolve_model

    problem = spec.problem
    resolve_model(problem.model)  # an unknown model fails before the storage is touched
    storage = store.open_storage(spec.storage, heartbeat=spec.heartbeat_s)
    hardware = fingerprint(problem.device)
    name = spec.study or store.study_name(resolve_model(problem.model).name, hardware.hardware_id)
    if name in store.study_names(storage):
        _check_problem(optuna.load_study(study_name=name, storage=storage), problem)

    if evaluator is None:
        evaluator = ConfigEvaluator(problem)
    num_layers = evaluator.num_layers
    target_length = evaluator.target_length  # an image prompt for a text-only model fails here, before any write
    study = optuna.create_study(
        study_name=name,
        storage=storage,
        directions=["minimize", "maximize"],
        sampler=make_sampler(spec.sampler, spec.seed, num_layers),
        load_if_exists=True,
    )
    _record_problem(study, problem, num_layers, hardware.to_dict(), target_length)

    full = study.user_attrs.get("full_accuracy")
    if full is None:
        full = evaluator.full_accuracy()
        study.set_user_attr("full_accuracy", full)
    else:
        evaluator.set_full_accuracy(full)

    for config in (PopConfig(skip=0), paper_default(num_layers), *spec.enqueue):
        study.enqueue_trial(config.to_dict(), skip_if_exists=True)
    if spec.trials:
        study.optimize(
            _objective(study, evaluator, problem),
            n_trials=spec.trials,
            timeout=spec.timeout,
            callbacks=callbacks,
            gc_after_trial=False,
        )
    if spec.baselines:
        ratios = list(spec.baseline_ratios) if spec.baseline_ratios else None
        add_baselines(study, evaluator, spec.baselines, ratios=ratios, calibration=spec.calibration, progress=progress)
    return study
