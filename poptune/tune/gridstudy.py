"""The grid study: every configuration of the search space measured once, as one study with the ``grid`` sampler.

As many trials as the canonical space has configurations (:func:`poptune.problem.space.all_configs`: 241 for
Gemma-3-270M's 18 layers), on a :class:`~poptune.problem.problem.TuningProblem`'s workload. By default it is stored
in an Optuna journal file beside its table (:func:`grid_storage`), small enough to commit, so that the same
command continues where it stopped on any machine of the same hardware id (an interrupted trial is measured
again; a complete grid returns at once). One process per grid: it times the A/A checks, re-times noisy trials and
confirms the front as a study on SQLite does. A stored grid is found again without loading the model
(:func:`stored_grid`). :class:`GridSpec` and :func:`grid_study` are the job behind ``poptune grid`` (the grid of a
spec measured, continued or read as stored); its table and README are :mod:`poptune.reports.gridtable`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from poptune.errors import ConfigError
from poptune.store.attributes import StoredStudy

if TYPE_CHECKING:
    import optuna

    from poptune.problem.problem import TuningProblem

__all__ = ["GridSpec", "grid_name", "grid_storage", "grid_study", "measure_grid", "replay_grid", "storage_of",
           "stored_grid"]


def grid_storage(model: str, device: str, folder: str | Path) -> str:
    """The grid's journal file in ``folder/raw/`` (beside its table, with the raw records of leaderboards/README.md):
    one per model and hardware id, committed with it."""
    from poptune.files import safe_name
    from poptune.measure.hardware import fingerprint
    from poptune.models import resolve_model

    name = f"grid-{safe_name(resolve_model(model).name)}-{safe_name(fingerprint(device).hardware_id)}"
    return f"journal:{Path(folder) / 'raw' / name}.journal"


def grid_name(problem: TuningProblem, study: str | None = None) -> str:
    """The grid study's name: ``study``, else ``<model>@<hardware-id>`` of this machine."""
    from poptune.tune.study import StudySpec, study_name_of

    return study_name_of(StudySpec(problem=problem, trials=1, study=study))


def _find(problem: TuningProblem, storage: str, study: str | None) -> optuna.Study | None:
    """The grid study as stored (no model loaded), or None where the storage holds none.

    A storage that cannot be opened (no database file yet) raises ``ConfigError``.
    """
    from poptune import store

    name = grid_name(problem, study)
    reader = store.open_reader(storage)
    return store.load_study(reader, name) if name in store.study_names(reader) else None


def stored_grid(problem: TuningProblem, storage: str, study: str | None = None) -> optuna.Study:
    """The grid study of ``problem`` in ``storage`` as stored (no model loaded).

    Raises:
        ConfigError: the storage holds no such study, or one made with other settings.
    """
    from poptune import store
    from poptune.tune.resume import check_problem

    found = _find(problem, storage, study)  # a missing database file raises its own message
    if found is None:
        raise ConfigError(f"no grid study {grid_name(problem, study)!r} in {store.public_url(storage)}: "
                          "run without --table-only to measure it")
    check_problem(found, problem)
    return found


def _num_layers(problem: TuningProblem, storage: str, study: str | None) -> tuple[int, Any]:
    """The model's layers: from the stored study when there is one (no model loaded), else a loaded evaluator."""
    from poptune.problem.evaluator import ConfigEvaluator

    try:
        found = _find(problem, storage, study)
    except ConfigError:  # no database yet
        found = None
    if found is not None:
        try:
            return StoredStudy.of(found).num_layers, None
        except ConfigError:  # a study that records no layers yet
            pass
    evaluator = ConfigEvaluator(problem)
    return evaluator.num_layers, evaluator


def measure_grid(problem: TuningProblem, storage: str, *, study: str | None = None, timeout: float | None = None,
                 confirm: bool = True, callbacks: Sequence[Callable[..., None]] = (),
                 announce: Callable[[int, int], None] | None = None, batch: int = 1) -> optuna.Study:
    """Run (or continue) the grid study of ``problem`` in ``storage``; returns it.

    Args:
        problem: The workload every configuration is measured on.
        storage: Where the grid is stored (checked before any work).
        study: Its name (default: ``<model>@<hardware-id>``).
        timeout: Stop starting trials after this many seconds (resume later).
        confirm: Run the A/A checks, re-measure noisy trials and confirm the front.
        callbacks: Optuna trial callbacks (progress lines).
        announce: Told ``(configurations, layers)`` once they are known, before the first trial.
        batch: Configurations measured at a time, their accuracy raced together (``StudySpec.batch``).
    """
    import optuna

    from poptune import store
    from poptune.problem.space import all_configs
    from poptune.tune.study import StudySpec, run_study

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    store.check_storage(storage)
    num_layers, evaluator = _num_layers(problem, storage, study)
    total = len(all_configs(num_layers, problem.kv))
    spec = StudySpec(problem=problem, trials=total, sampler="grid", storage=storage, study=study,
                     seed=problem.seed, timeout=timeout, confirm=confirm, sole_worker=True, batch=batch)
    if announce is not None:
        announce(total, num_layers)
    return run_study(spec, evaluator=evaluator, callbacks=list(callbacks))


@dataclass(frozen=True)
class GridSpec:
    """One grid to build.

    Attributes:
        problem: The workload every configuration is measured on (a study's, ``poptune study``'s defaults).
        out: The folder of the table and its README (default: ``leaderboards`` of the current directory).
        storage: Where the grid study is stored (default: a journal file in ``out``, :func:`storage_of`).
        study: The grid study's name (default: ``<model>@<hardware-id>``).
        timeout: Stop starting trials after this many seconds (resume later).
        confirm: Run the A/A checks, re-time noisy trials and confirm the front (``--no-confirm``: not).
        table_only: Write the table and README from the stored grid, measuring nothing.
        batch: Configurations measured at a time, their accuracy raced together: each batch of items scored in
            one pass for all of them (``poptune study --batch``); the same measurements.
    """

    problem: TuningProblem
    out: str | Path = "leaderboards"
    storage: str | None = None
    study: str | None = None
    timeout: float | None = None
    confirm: bool = True
    table_only: bool = False
    batch: int = 1


def storage_of(spec: GridSpec) -> str:
    """``spec.storage``, else the grid's journal file beside its table (one per model and hardware id)."""
    return spec.storage or grid_storage(spec.problem.model, spec.problem.device, spec.out)


def grid_study(spec: GridSpec, *, callbacks: Sequence[Callable[..., None]] = (),
               announce: Callable[[int, int], None] | None = None) -> optuna.Study:
    """Measure (or continue, or with ``table_only`` read) the grid of ``spec``; returns the study, whose table and
    README :func:`poptune.reports.gridtable.write` writes (with :func:`storage_of`).

    Args:
        spec: The grid.
        callbacks: Optuna trial callbacks while measuring (progress lines).
        announce: Told ``(configurations, layers)`` before the first trial.

    Raises:
        ConfigError: ``out`` not a writable folder, a storage that cannot be used; with ``table_only``, no such
            grid stored, or one made with other settings.
    """
    from poptune import store
    from poptune.files import check_writable_folder

    check_writable_folder(spec.out)
    if spec.storage is None and not spec.table_only:  # the default journal's folder, <out>/raw/
        (Path(spec.out) / "raw").mkdir(exist_ok=True)
    storage = storage_of(spec)
    store.check_storage(storage)
    if spec.table_only:
        return stored_grid(spec.problem, storage, spec.study)
    return measure_grid(spec.problem, storage, study=spec.study, timeout=spec.timeout, confirm=spec.confirm,
                        callbacks=callbacks, announce=announce, batch=spec.batch)


def replay_grid(storage: str | None, *, model: str, tasks: tuple[str, ...], limit: int, lengths: tuple[int, ...],
                max_drop: float | None) -> None:
    """Measure a grid study for real into ``storage`` to replay (the tuner table's ``--build``): every configuration
    of ``model`` on ``tasks`` (``limit`` items each) at ``lengths``, two repeats, no decode, the grid sampler."""
    from poptune.boundary import registry as boundary_registry
    from poptune.evaluate.taskpack import data_dir
    from poptune.problem.evaluator import ConfigEvaluator
    from poptune.problem.problem import TuningProblem
    from poptune.problem.space import MAX_OFFSET
    from poptune.tune.study import StudySpec, run_study

    directory = data_dir()
    problem = TuningProblem(model=model, tasks=tasks, limit=limit, data_dir=str(directory) if directory else None,
                            lengths=lengths, repeats=2, decode_tokens=0, max_drop=max_drop)
    evaluator = ConfigEvaluator(problem)
    # Room enough: the grid sampler stops the study.
    raw = evaluator.num_layers * len(boundary_registry.NAMES) * (MAX_OFFSET + 1)
    run_study(StudySpec(problem=problem, trials=raw + 8, sampler="grid", storage=storage), evaluator=evaluator)
