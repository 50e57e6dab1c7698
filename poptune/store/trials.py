"""The one reader of stored trials: what a completed trial of a study measured, read once into a typed record.

Every reader of studies (the front, the report, the leaderboards, the export, the command line, the replay
environment and the tuner itself) reads a trial through :class:`StoredTrial` rather than its raw user
attributes, so that what a stored key means, and its default for studies stored before it, is said here once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from poptune.engine import PopConfig
from poptune.errors import ConfigError
from poptune.interval import Interval
from poptune.objectives.ttft import latency_objective
from poptune.store.attributes import StoredStudy
from poptune.store.measurement import POP, Measurement, method_of

if TYPE_CHECKING:
    import optuna

__all__ = [
    "StoredTrial", "check_trials", "completed", "confirmations", "fail_reason", "is_answer", "is_pop",
    "latency_objective", "measured_table", "measures", "reference_ms", "stored_config",
]


def reference_ms(study: "optuna.Study") -> float | None:
    """The study's reference full-model TTFT in ms (None before its first measurement)."""
    return StoredStudy.of(study).reference_ms


def confirmations(study: "optuna.Study") -> dict[str, dict[str, Any]]:
    """The confirmation pass's figures per trial number (a string), where the study ran one."""
    return StoredStudy.of(study).confirmations


def is_pop(trial: "optuna.trial.FrozenTrial") -> bool:
    """POP's own trial (a baseline's carries another ``method``)."""
    return method_of(trial.user_attrs) == POP


def measures(trial: "optuna.trial.FrozenTrial") -> bool:
    """A POP trial, in any state, that measures a configuration of the search itself: not an answer from
    storage, not a re-measure (what a study's budget counts)."""
    return is_pop(trial) and not is_answer(trial) and "remeasure_of" not in trial.user_attrs


def is_answer(trial: "optuna.trial.FrozenTrial") -> bool:
    """Whether the trial was answered from storage (a copy of an earlier trial's measurement)."""
    return "reused_from" in trial.user_attrs


def fail_reason(trial: "optuna.trial.FrozenTrial") -> str | None:
    """Why a failed trial failed (None where it says not)."""
    return trial.user_attrs.get("fail_reason")


def stored_config(trial: "optuna.trial.FrozenTrial") -> PopConfig | None:
    """The configuration a trial in any state wrote that it measures (None before it wrote one)."""
    config = trial.user_attrs.get("config")
    return PopConfig.from_dict(config) if config is not None else None


def completed(study: "optuna.Study", method: str | None = POP) -> list["optuna.trial.FrozenTrial"]:
    """Completed trials of ``method`` (default POP's own; None: every method, baselines too) in number order.

    Baselines are stored in the study of their model and machine as trials with a ``method`` user attribute
    and no search parameters; trials without the attribute are POP's.
    """
    import optuna

    trials = sorted(study.get_trials(deepcopy=False, states=[optuna.trial.TrialState.COMPLETE]),
                    key=lambda t: t.number)
    if method is None:
        return trials
    return [t for t in trials if method_of(t.user_attrs) == method]


@dataclass(frozen=True)
class StoredTrial:
    """What one completed trial measured, as stored (see :class:`~poptune.store.measurement.Measurement`).

    Attributes:
        number: The trial's number in its study.
        method: ``pop`` or a baseline's name.
        config: The configuration measured (a baseline's: the POP configuration it ran as, skip 0 mostly).
        values: The study's objectives, in the order of its names
        (:attr:`~poptune.store.attributes.StoredStudy.objectives`;
            read them by name: :func:`poptune.objectives.registry.named`).
        speedup: The paired TTFT speedup over the workload; ``speedup_ci`` it with its 95% interval where measured.
        pairs: The fewest timing pairs of a prompt length; ``ideal``: the speedup of skipped FLOPs alone.
        ttft_ms: The configuration's expected p50 TTFT over the workload; ``full_ttft_ms``: its paired full model's.
        latency: Per prompt length (a string, as stored), the timing row (see ``Measurement.latency``).
        target_length: The prompt length of the objective; ``weighted``: whether the objective combines the
            workload's lengths by weight (then ``speedup`` and its interval are the combined figures).
        accuracy: Per task, on the items scored; ``accuracy_mean`` their mean; ``full_accuracy`` the full model's.
        drop_points: The mean accuracy drop in points; ``drop_ci`` it with its paired 95% interval where measured.
        items: Items scored over all tasks (None where not stored).
        feasible: Within the study's accuracy budget; ``noisy``: a null check failed when it was measured.
        reused_from: The trial whose answer it copies from storage; ``remeasure_of``: the noisy trial it
            measures again (neither: it measured its own configuration).
        details: A baseline's ratio, removed layers, scores and calibration.
        provenance: How it was measured (command, commit, threads, load).
        seconds: Wall time from start to completion; a trial of a batch, its own (its objective's and its share
            of the batch's race: user attribute ``seconds``, :mod:`poptune.tune.batch`).
    """

    number: int
    method: str
    config: PopConfig
    values: tuple[float, ...]
    speedup: float
    speedup_ci: Interval | None
    pairs: int | None
    ideal: float | None
    ttft_ms: float | None
    full_ttft_ms: float | None
    latency: Mapping[str, Mapping[str, Any]]
    target_length: int | None
    weighted: bool
    accuracy: Mapping[str, float]
    accuracy_mean: float
    full_accuracy: Mapping[str, float]
    drop_points: float
    drop_ci: Interval | None
    items: int | None
    feasible: bool
    noisy: bool
    reused_from: int | None
    remeasure_of: int | None
    details: Mapping[str, Any]
    provenance: Mapping[str, Any] | None
    seconds: float
    _info: Mapping[str, Any] = field(repr=False, compare=False)

    @classmethod
    def of(cls, trial: "optuna.trial.FrozenTrial") -> "StoredTrial":
        """Read ``trial`` (a completed one: its measurement stored) once.

        Raises:
            ConfigError: a key every measurement stores is missing, or a stored value is not of its kind
                (:func:`_checked`): a trial another tool wrote or changed, named in one line.
        """
        a = _checked(trial)
        drop, items = a.get("drop"), a.get("items")
        start, end = trial.datetime_start, trial.datetime_complete
        return cls(
            number=trial.number, method=method_of(a), config=PopConfig.from_dict(a["config"]),
            values=tuple(trial.values), speedup=a["speedup"],
            speedup_ci=Interval.from_ends(a["speedup"], a.get("speedup_ci")),
            pairs=a.get("pairs"), ideal=a.get("ideal"), ttft_ms=a.get("prefill_ms"), full_ttft_ms=a.get("full_ms"),
            latency=a.get("latency", {}), target_length=a.get("target_length"),
            weighted=bool(a.get("latency_weights")), accuracy=a.get("accuracy", {}),
            # ignore: every measurement stores accuracy_mean; .get leaves a record without one readable
            accuracy_mean=a.get("accuracy_mean"), full_accuracy=a.get("full_accuracy", {}),  # type: ignore[arg-type]
            drop_points=a["drop_points"], drop_ci=Interval.from_fields(drop) if drop else None,
            items=sum(items.values()) if items else None, feasible=bool(a.get("feasible", True)),
            noisy=bool(a.get("noisy")), reused_from=a.get("reused_from"), remeasure_of=a.get("remeasure_of"),
            details=a.get("details", {}), provenance=a.get("provenance"),
            seconds=float(a["seconds"]) if "seconds" in a else  # a batched trial's own (poptune.tune.batch)
            (end - start).total_seconds() if isinstance(start, datetime) and end else 0.0,
            _info=a,
        )

    @property
    def is_pop(self) -> bool:
        return self.method == POP

    @property
    def objective_accuracy(self) -> float:
        """The accuracy objective as the trial stored it (its plain mean in a trial stored before it)."""
        return float(self._info.get("objective_accuracy", self.accuracy_mean))

    @property
    def measured(self) -> bool:
        """Whether it measured a configuration itself (not an answer from storage, not a re-measure)."""
        return self.reused_from is None and self.remeasure_of is None

    @property
    def target_row(self) -> Mapping[str, Any]:
        """The timing row of the objective's prompt length (empty where not stored)."""
        return self.latency.get(str(self.target_length), {})

    def measurement(self) -> Measurement:
        """The full :class:`Measurement` back (what the tuner stored)."""
        return Measurement.from_info(dict(self._info))

    def info(self) -> dict[str, Any]:
        """A copy of everything stored, to store again (an answer from storage copies its trial's), but a batched
        trial's own seconds (the answer's are its own)."""
        return {k: v for k, v in self._info.items() if k != "seconds"}


#: The keys every stored measurement holds, each a finite number but ``config`` (a mapping).
_REQUIRED = ("config", "speedup", "drop_points")
#: Keys a measurement may hold, by the kind of value (None allowed): numbers, whole numbers, mappings.
_NUMBERS = ("ideal", "prefill_ms", "full_ms", "accuracy_mean", "objective_accuracy", "seconds")
_INTEGERS = ("pairs", "target_length", "reused_from", "remeasure_of")
_MAPPINGS = ("latency", "latency_weights", "accuracy", "full_accuracy", "drop", "items", "details", "provenance")


def _is_finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _checked(trial: "optuna.trial.FrozenTrial") -> dict[str, Any]:
    """``trial``'s user attributes, checked to be what a measurement stores (issue 87: a foreign study's trial
    without ``config`` was a ``KeyError``, ``speedup = "fast"`` a ``ValueError``, ``latency = NaN`` an
    ``AttributeError``, in every reader)."""
    a = trial.user_attrs

    def refuse(what: str) -> ConfigError:
        return ConfigError(f"stored trial {trial.number} is not a measurement poptune stores: {what}")

    for key in _REQUIRED:
        if key not in a:
            raise refuse(f"it has no `{key}`")
    if not isinstance(a["config"], Mapping):
        raise refuse(f"its `config` is {a['config']!r}, not a configuration")
    for key in (*_REQUIRED[1:], *_NUMBERS):
        value = a.get(key)
        if (value is not None or key in _REQUIRED) and not _is_finite(value):
            raise refuse(f"its `{key}` is {value!r}, not a finite number")
    for key in _INTEGERS:
        if a.get(key) is not None and not (isinstance(a[key], int) and not isinstance(a[key], bool)):
            raise refuse(f"its `{key}` is {a[key]!r}, not a whole number")
    for key in _MAPPINGS:
        if a.get(key) is not None and not isinstance(a[key], Mapping):
            raise refuse(f"its `{key}` is {a[key]!r}, not a mapping")
    ends = a.get("speedup_ci")
    if ends is not None and not (isinstance(ends, (list, tuple)) and len(ends) == 2 and all(
            e is None or _is_finite(e) for e in ends)):
        raise refuse(f"its `speedup_ci` is {ends!r}, not two finite numbers")
    if any(not isinstance(row, Mapping) for row in (a.get("latency") or {}).values()):
        raise refuse("its `latency` holds a row that is not a mapping")
    try:
        PopConfig.from_dict(dict(a["config"]))
    except (ConfigError, TypeError) as e:
        raise refuse(f"its `config` {dict(a['config'])} is not a configuration ({e})") from None
    return a


def check_trials(study: "optuna.Study") -> None:
    """Refuse, in one line, a study whose completed trials are not measurements poptune stores, or whose
    configurations do not fit the study's model (a ``skip`` past its layers, tampered in storage: issue 87).

    Raises:
        ConfigError: the first such trial, named.
    """
    trials = completed(study, method=None)
    num_layers = StoredStudy.of(study).num_layers if trials else 0  # a study with none yet: nothing to check
    for trial in trials:
        try:
            config = StoredTrial.of(trial).config
        except ConfigError as e:
            raise ConfigError(f"study {study.study_name!r}: {e}") from None
        try:
            config.check(num_layers)
        except ConfigError as e:
            raise ConfigError(f"study {study.study_name!r}: stored trial {trial.number}'s configuration ({config}) "
                              f"does not fit its {num_layers}-layer model: {e}") from None


def measured_table(study: "optuna.Study") -> dict[PopConfig, Measurement]:
    """What the study measured per configuration: POP's completed trials, a trusted one first.

    A trial marked noisy answers only where no trusted measurement of its configuration exists.
    """
    table: dict[PopConfig, Measurement] = {}
    for trial in sorted((StoredTrial.of(t) for t in completed(study)), key=lambda t: t.noisy):
        measurement = trial.measurement()
        table.setdefault(measurement.config, measurement)
    return table
