"""How fast each sampler finds good configurations, on the replay of a fully measured (grid) study.

For each sampler and seed an in-memory Optuna study asks configurations and a :class:`Replay` answers them
from the stored grid (no model, seconds on a CPU): the best within-budget speedup after 8, 16 and 32 trials,
whether the grid's fastest within-budget configuration was among the first 16, and the hypervolume of
(latency objective, accuracy) after 32 trials. Seeded samplers make the table reproducible.
"""

from __future__ import annotations

import statistics
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

from poptune import store
from poptune.engine import PopConfig
from poptune.errors import ConfigError
from poptune.store.measurement import Measurement
from poptune.tune.problem import TuningProblem
from poptune.tune.space import all_configs, make_sampler, suggest_config

if TYPE_CHECKING:
    import optuna

__all__ = ["CHECKPOINTS", "Replay", "TunerRow", "covers_grid", "hypervolume", "tuner_efficiency"]

CHECKPOINTS = (8, 16, 32)


@dataclass(frozen=True)
class TunerRow:
    """One sampler over several seeds: medians of the best within-budget speedup at each checkpoint."""

    sampler: str
    seeds: int
    best: dict[int, float]
    hits: int
    hypervolume: float


@dataclass(frozen=True)
class Replay:
    """What a stored study measured, to answer configurations from (no model).

    Attributes:
        study_name: The study replayed.
        num_layers: Its model's layers (the search space).
        table: Per configuration, its measurement (a trusted trial first, see :func:`poptune.store.measured_table`).
        max_drop: The study's accuracy budget (None: none).
    """

    study_name: str
    num_layers: int
    table: dict[PopConfig, Measurement]
    max_drop: float | None

    @classmethod
    def of(cls, study: "optuna.Study") -> "Replay":
        problem = TuningProblem.from_dict(study.user_attrs["problem"])
        return cls(study.study_name, int(study.user_attrs["num_layers"]), store.measured_table(study), problem.max_drop)

    def answer(self, config: PopConfig) -> Measurement:
        """The stored measurement of ``config``.

        Raises:
            ConfigError: the study never measured it.
        """
        if config not in self.table:
            raise ConfigError(f"the study {self.study_name!r} holds no measurement of {config}")
        return self.table[config]


def covers_grid(replay: Replay) -> bool:
    """Whether the stored study measured every configuration of the search space."""
    return set(all_configs(replay.num_layers)) <= set(replay.table)


def hypervolume(points: list[tuple[float, float]], reference: tuple[float, float]) -> float:
    """2-D hypervolume of (prefill ms to minimise, accuracy to maximise) against ``reference``."""
    front = sorted({p for p in points if p[0] <= reference[0] and p[1] >= reference[1]})
    volume, best = 0.0, reference[1]
    for ms, acc in front:  # by latency ascending: each adds the slab above the best accuracy so far
        if acc > best:
            volume += (reference[0] - ms) * (acc - best)
            best = acc
    return volume


def _history(replay: Replay, sampler: str, seed: int, trials: int, max_drop: float,
             reference_ms: float) -> list[tuple[float, float, float, float]]:
    """(speedup, latency objective ms, drop, accuracy) of each trial a sampler asks for."""
    import optuna

    study = optuna.create_study(directions=["minimize", "maximize"],
                                sampler=make_sampler(sampler, seed, replay.num_layers))
    history = []

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        config = suggest_config(trial, replay.num_layers)
        measured = replay.answer(config)
        trial.set_constraint("max_drop", measured.drop_points - max_drop)
        latency = store.latency_objective(reference_ms, measured.speedup)
        history.append((measured.speedup, latency, measured.drop_points, measured.accuracy_mean))
        return latency, measured.accuracy_mean

    study.optimize(objective, n_trials=trials)
    return history


def tuner_efficiency(replay: Replay, reference_ms: float, *, max_drop: float,
                     samplers: tuple[str, ...] = ("tpe", "nsga2", "random"), seeds: int = 10) -> list[TunerRow]:
    """Each sampler's medians over ``seeds`` on ``replay`` with an accuracy budget of ``max_drop``."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    configs = list(replay.table.values())
    target = max((m.speedup for m in configs if m.drop_points <= max_drop), default=float("inf"))
    reference = (reference_ms / min(m.speedup for m in configs) * 1.01, min(m.accuracy_mean for m in configs) - 0.01)
    rows = []
    for sampler in samplers:
        bests: dict[int, list[float]] = {n: [] for n in CHECKPOINTS}
        hits, volumes = 0, []
        for seed in range(seeds):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                history = _history(replay, sampler, seed, max(CHECKPOINTS), max_drop, reference_ms)
            for n in CHECKPOINTS:
                bests[n].append(max((s for s, _, d, _ in history[:n] if d <= max_drop), default=float("nan")))
            hits += any(s >= target and d <= max_drop for s, _, d, _ in history[:16])
            volumes.append(hypervolume([(ms, acc) for _, ms, _, acc in history], reference))
        rows.append(TunerRow(sampler, seeds, {n: statistics.median(v) for n, v in bests.items()}, hits,
                             statistics.median(volumes)))
    return rows
