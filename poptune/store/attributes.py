"""The one reader and writer of a study's attributes: what poptune records about a study beside its trials.

A study's trials are read through :class:`~poptune.store.trials.StoredTrial`; what the study itself records (its
tuning problem, model, hardware, references, runs, checks, certification) is read and written through
:class:`StoredStudy`, so that each key, its type and its default for studies stored before it are said here once.
Every reader (the report, the leaderboards, the export, the grid, the replay, the environments and the tuner)
and every writer (the study, its trust checks and its certification) goes through it.

Schema versions (the ``schema_version`` attribute; a study stored before it had one reads as version 0). Reads
migrate an older study in memory, never in its storage (a reader does not write, and an old study resumed by a
newer poptune keeps its attributes as they were):

- 0 to 1: a ``problem`` stored before calibrated K/V (no ``kv``) searched the paper's space, ``kv = ["own"]``; a
  study without ``target_length`` timed its problem's ``target_length``, else its first length. A problem's
  fields added since take their defaults (:meth:`poptune.problem.problem.TuningProblem.from_dict`); an old study's
  ``full_accuracy`` without ``full_run`` (no per-item outcomes) is the full model's reference as it stands.
- 1 to 2: nothing to migrate; from 2 on, the per-item outcomes of lm-eval's tasks are named by their own index.
  Before, lm-eval named the documents of a round asked out of order (a study's shuffled items) by the order asked,
  not their own: the full model's and a configuration's outcomes on the same round were paired right, but under
  each other's indices, so a study stored before 2 on such tasks is read, never resumed
  (:attr:`StoredStudy.unindexed_tasks`, read by :func:`poptune.tune.resume.check_problem` and the grid's table).

Read with their defaults, no schema change: a ``problem`` without ``objectives`` (stored before they had names)
has TTFT and accuracy, in that order; a ``problem`` whose ``dtype`` is None (stored before studies named it)
ran float32 on a CPU and bfloat16 on CUDA, and a resume compares it so (:func:`poptune.tune.resume.check_problem`);
a study without an objective's reference (``reference_tpot_ms``, stored before it) reads each of its trials
against its own paired full model. References are stored under their
objective's attribute (:attr:`~poptune.objectives.base.Objective.reference_attr`: the names studies stored
before references were keyed by objective, ``reference_prefill_ms`` and ``reference_tpot_ms``, stay theirs).

Elsewhere, on purpose: a trial's keys and their defaults live in :mod:`poptune.store.trials`; a configuration's
stored form (``kv`` written only when not ``own``, so that one stored before calibrated K/V reads the same) in
:meth:`poptune.engine.PopConfig.to_dict`; the former name of ``--trials`` (``--max-trials``) in the command line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from poptune.errors import ConfigError
from poptune.kv import registry as kv_registry
from poptune.objectives.base import References
from poptune.objectives.registry import DEFAULT, OBJECTIVES
from poptune.objectives.registry import get as get_objective

if TYPE_CHECKING:
    import optuna

__all__ = ["INDEXED_SCHEMA", "PROBLEM_ATTR", "SCHEMA_ATTR", "SCHEMA_VERSION", "StoredStudy", "migrate"]

#: The schema this poptune writes (see the module's docstring for what each version changed).
SCHEMA_VERSION = 2

#: The first schema whose lm-eval items' outcomes are named by their own index (see the module's docstring).
INDEXED_SCHEMA = 2

#: The attribute holding the schema version (absent from studies stored before it: version 0).
SCHEMA_ATTR = "schema_version"

#: The attribute every study poptune writes holds (its tuning problem), first of all.
PROBLEM_ATTR = "problem"


def migrate(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """A study's attributes as stored at any schema version, read as the current one (a copy).

    Raises:
        ConfigError: a study written by a newer poptune (a schema this one does not know).
    """
    data = dict(attrs)
    version = int(data.get(SCHEMA_ATTR, 0))
    if version > SCHEMA_VERSION:
        raise ConfigError(f"the study's attributes have schema version {version}, newer than this poptune's "
                          f"({SCHEMA_VERSION}): upgrade poptune to read it")
    if version < 1 and PROBLEM_ATTR in data:
        problem = dict(data[PROBLEM_ATTR])
        # a study stored before calibrated K/V searched the paper's space
        problem.setdefault("kv", [kv_registry.DEFAULT])
        data[PROBLEM_ATTR] = problem
    data[SCHEMA_ATTR] = SCHEMA_VERSION
    return data


class StoredStudy:
    """A study's attributes, read (migrated, see :func:`migrate`) and written through one typed interface.

    Reads are live: each property reads the storage's attributes at that moment, so that what another worker
    wrote meanwhile is seen, as with Optuna's own ``study.user_attrs``; a :meth:`snapshot` reads them once.

    Args:
        study: An Optuna study of any storage.
    """

    def __init__(self, study: "optuna.Study", _frozen: Mapping[str, Any] | None = None) -> None:
        self.study = study
        self._frozen = dict(_frozen) if _frozen is not None else None
        self._migrated = migrate(self._frozen) if self._frozen is not None else None

    @classmethod
    def of(cls, study: "optuna.Study") -> "StoredStudy":
        """The attributes of ``study``, read live."""
        return cls(study)

    @classmethod
    def snapshot(cls, study: "optuna.Study") -> "StoredStudy":
        """The attributes of ``study`` as they are now, read once (a report's); writes still go to the study."""
        return cls(study, study.user_attrs)

    @property
    def name(self) -> str:
        return self.study.study_name

    def _raw(self) -> Mapping[str, Any]:
        return self._frozen if self._frozen is not None else self.study.user_attrs

    def attrs(self) -> dict[str, Any]:
        """Every attribute, migrated to the current schema (a copy)."""
        return dict(self._migrated) if self._migrated is not None else migrate(self.study.user_attrs)

    def _get(self, key: str, default: Any = None) -> Any:
        attrs = self._migrated if self._migrated is not None else migrate(self.study.user_attrs)
        return attrs.get(key, default)

    # -- what the study measures, recorded once when it is made

    @property
    def schema(self) -> int:
        """The schema version the study was stored with (0: before versions)."""
        return int(self._raw().get(SCHEMA_ATTR, 0))

    @property
    def recorded(self) -> bool:
        """Whether the study records its tuning problem (every study poptune writes does, first of all)."""
        return PROBLEM_ATTR in self._raw()

    @property
    def unindexed_tasks(self) -> list[str]:
        """The lm-eval tasks whose per-item outcomes may sit under each other's indices (stored before
        :data:`INDEXED_SCHEMA`; empty otherwise): a study with any is read, never resumed."""
        from poptune.evaluate.suite import harness_tasks

        return harness_tasks(self.problem.get("tasks") or ()) if self.schema < INDEXED_SCHEMA else []

    @property
    def problem(self) -> dict[str, Any]:
        """The tuning problem as stored (:meth:`poptune.problem.problem.TuningProblem.to_dict`; empty: none)."""
        return dict(self._get(PROBLEM_ATTR) or {})

    @property
    def stored_problem(self) -> dict[str, Any]:
        """The tuning problem exactly as stored, not migrated (what an export's provenance copies verbatim)."""
        return dict(self._raw()[PROBLEM_ATTR])

    @property
    def max_drop(self) -> float | None:
        """The accuracy budget in points (None: none)."""
        return self.problem.get("max_drop")

    @property
    def kv(self) -> tuple[str, ...]:
        """The K/V sources the study searches."""
        return tuple(self.problem.get("kv", (kv_registry.DEFAULT,)))

    @property
    def objectives(self) -> tuple[str, ...]:
        """The study's objectives by name, in the order of its trials' values (a study stored before objectives
        had names: :data:`poptune.objectives.registry.DEFAULT`, TTFT and accuracy)."""
        return tuple(self.problem.get("objectives") or DEFAULT)

    @property
    def model(self) -> str | None:
        """The model's resolved name."""
        return self._get("model")

    @property
    def weights_fingerprint(self) -> str | None:
        return self._get("weights_fingerprint")

    @property
    def num_layers(self) -> int:
        """The model's decoder layers.

        Raises:
            ConfigError: a study that does not record them (not a poptune study).
        """
        value = self._get("num_layers")
        if value is None:
            raise ConfigError(f"study {self.name!r} records no `num_layers`: it is not a poptune study")
        return int(value)

    @property
    def hardware(self) -> dict[str, Any]:
        """The machine's fingerprint (:class:`poptune.measure.hardware.HardwareFingerprint` as a dict)."""
        return dict(self._get("hardware") or {})

    @property
    def hardware_id(self) -> str | None:
        return self.hardware.get("hardware_id")

    @property
    def versions(self) -> dict[str, Any]:
        return dict(self._get("versions") or {})

    @property
    def target_length(self) -> int | None:
        """The prompt tokens the latency objective times, as stored (an image prompt's, all told)."""
        return self._get("target_length")

    @property
    def timed_length(self) -> int:
        """The objective's prompt length: stored, else the problem's target, else its first length."""
        problem = self.problem
        return self.target_length or problem.get("target_length") or problem["lengths"][0]

    def record_problem(self, problem: Mapping[str, Any], *, target_length: int, model: str,
                       weights_fingerprint: str | None, num_layers: int, hardware: Mapping[str, Any],
                       versions: Mapping[str, Any]) -> None:
        """Record what the study measures, once, when it is made (with the current schema version)."""
        s = self.study
        s.set_user_attr(SCHEMA_ATTR, SCHEMA_VERSION)
        s.set_user_attr(PROBLEM_ATTR, dict(problem))  # with `image` for an image-prompt study
        s.set_user_attr("target_length", target_length)  # prompt tokens timed (an image prompt's, all told)
        s.set_user_attr("model", model)
        s.set_user_attr("weights_fingerprint", weights_fingerprint)
        s.set_user_attr("num_layers", num_layers)
        s.set_user_attr("hardware", dict(hardware))
        s.set_user_attr("versions", dict(versions))

    # -- the full model's reference

    @property
    def reference_ms(self) -> float | None:
        """The reference full-model TTFT in ms (None before the first measurement): the ``ttft`` objective's
        reference (:attr:`references`), which every speed figure of the study's rows is read against."""
        return self._get("reference_prefill_ms")

    @property
    def references(self) -> References:
        """The reference figures the study's objectives are read against, by objective name (each stored under
        its objective's :attr:`~poptune.objectives.base.Objective.reference_attr`)."""
        attrs = self.attrs()  # read once
        return References({o.name: float(attrs[o.reference_attr]) for o in OBJECTIVES.values()
                           if o.reference is not None and attrs.get(o.reference_attr) is not None})

    def set_reference(self, name: str, value: float) -> None:
        """Record the study's reference figure of objective ``name`` (once: its first measurement's)."""
        self.study.set_user_attr(get_objective(name).reference_attr, value)

    @property
    def full_accuracy(self) -> dict[str, float] | None:
        """The full model's accuracy per task on the first round's items (None before it was measured)."""
        return self._get("full_accuracy")

    @property
    def workload(self) -> dict[str, Any] | None:
        return self._get("workload")

    @property
    def latency_points(self) -> list[list[float]]:
        """The workload's timed prompt lengths and their weights."""
        return list(self._get("latency_points") or [])

    def record_full(self, full_accuracy: Mapping[str, float], workload: Mapping[str, Any],
                    latency_points: list[tuple[int, float]]) -> None:
        """Record the full model's reference accuracy, the workload and its timed lengths (once per study)."""
        self.study.set_user_attr("full_accuracy", dict(full_accuracy))
        self.study.set_user_attr("workload", dict(workload))
        self.study.set_user_attr("latency_points", [list(p) for p in latency_points])

    @property
    def full_run(self) -> dict[str, Any] | None:
        """The full model's per-item outcomes so far (:meth:`poptune.evaluate.suite.TaskRun.to_dict`)."""
        return self._get("full_run")

    def set_full_run(self, run: Mapping[str, Any]) -> None:
        self.study.set_user_attr("full_run", dict(run))

    @property
    def prompts(self) -> dict[str, Any] | None:
        """A prompts study's requests: hashes, lengths and file indices (the text only if the user asked)."""
        return self._get("prompts")

    def set_prompts(self, record: Mapping[str, Any]) -> None:
        self.study.set_user_attr("prompts", dict(record))

    @property
    def prompts_null(self) -> dict[str, Any] | None:
        """A prompts study's null reference, measured once (:mod:`poptune.evaluate.nullref`): the full model's
        answers under a harmless change, scored as a configuration's (None: a study stored before it)."""
        return self._get("prompts_null")

    def set_prompts_null(self, record: Mapping[str, Any]) -> None:
        self.study.set_user_attr("prompts_null", dict(record))

    @property
    def state_reuse_check(self) -> dict[str, Any] | None:
        return self._get("state_reuse_check")

    def set_state_reuse_check(self, max_abs_logit_diff: float) -> None:
        self.study.set_user_attr("state_reuse_check", {"max_abs_logit_diff": max_abs_logit_diff})

    # -- the runs and the trust checks, appended as they happen

    @property
    def runs(self) -> list[dict[str, Any]]:
        """Each run's provenance, in order."""
        return list(self._get("runs") or [])

    def add_run(self, entry: Mapping[str, Any]) -> None:
        self.study.set_user_attr("runs", self.runs + [dict(entry)])

    def set_runs(self, runs: list[dict[str, Any]]) -> None:
        self.study.set_user_attr("runs", list(runs))

    @property
    def null_checks(self) -> list[dict[str, Any]]:
        """The A/A checks, in order."""
        return list(self._get("null_checks") or [])

    def add_null_check(self, entry: Mapping[str, Any]) -> None:
        self.study.set_user_attr("null_checks", self.null_checks + [dict(entry)])

    @property
    def confirmation(self) -> dict[str, Any]:
        """The confirmation pass (empty where the study ran none)."""
        return dict(self._get("confirmation") or {})

    @property
    def confirmations(self) -> dict[str, dict[str, Any]]:
        """The confirmation pass's figures per trial number (a string)."""
        return self.confirmation.get("trials", {})

    def set_confirmation(self, record: Mapping[str, Any]) -> None:
        self.study.set_user_attr("confirmation", dict(record))

    @property
    def certification(self) -> dict[str, Any] | None:
        """The front's certification on fresh items (:mod:`poptune.tune.certify`; None: none)."""
        return self._get("certification")

    def set_certification(self, record: Mapping[str, Any]) -> None:
        self.study.set_user_attr("certification", dict(record))
