"""How fast each sampler finds good configurations, on the replay of a fully measured grid (no model).

A :class:`~poptune.problem.replay.Replay` answers configurations from what was measured (a stored study or a
grid file, exactly or with seeded noise).

:func:`tuner_efficiency`: for each sampler and seed an in-memory Optuna study asks configurations and the
replay answers them (seconds on a CPU). The sampler sees the (possibly noisy) answers; the table scores the
configurations it asked by their recorded figures: the best candidate's speedup after each checkpoint (a
candidate: not rejected by the budget -- the drop's recorded 95% lower end within it, as a study's constraint
-- and the drop itself within it: what a search hands to certification, :meth:`Measurement.candidate`; a seed
that found none scores 1.0x, the full model), how many seeds asked a configuration as fast as the grid's
fastest candidate (hits), the hypervolume of (latency objective, accuracy objective), each as a mean over seeds with a
95%
bootstrap interval, and the number of trials each seed needed to reach 95% of the whole grid's hypervolume.
Every trial counts, a configuration asked twice too. Seeded samplers make the table reproducible.
"""

from __future__ import annotations

import math
import statistics
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

from poptune import store
from poptune.errors import ConfigError
from poptune.interval import Interval
from poptune.objectives import registry as objectives
from poptune.objectives.base import References
from poptune.objectives.ttft import TTFT
from poptune.problem.replay import Replay, covers_grid
from poptune.problem.space import all_configs
from poptune.store.measurement import Measurement
from poptune.tune.params import suggest_config
from poptune.tune.samplers import make_sampler

if TYPE_CHECKING:
    import optuna

__all__ = ["CHECKPOINTS", "HV_SHARE", "TUNER_SAMPLERS", "TunerRow", "hypervolume", "implied_held",
           "mean_interval", "tuner_efficiency"]

CHECKPOINTS = (8, 16, 32)

#: The samplers of the tuner table: Optuna's TPE, NSGA-II, random search, the grid in a seeded order,
#: Optuna's Gaussian-process sampler (torch and scipy, offline), and the structure-aware sampler
#: (:mod:`poptune.tune.structured`, given the grid's FLOPs ideals).
TUNER_SAMPLERS = ("tpe", "nsga2", "random", "grid", "gp", "structured")

#: The share of the grid's hypervolume whose first reach is counted in trials.
HV_SHARE = 0.95


def hypervolume(points: list[tuple[float, float]], reference: tuple[float, float]) -> float:
    """2-D hypervolume of (prefill ms to minimise, accuracy to maximise) against ``reference``."""
    front = sorted({p for p in points if p[0] <= reference[0] and p[1] >= reference[1]})
    volume, best = 0.0, reference[1]
    for ms, acc in front:  # by latency ascending: each adds the slab above the best accuracy so far
        if acc > best:
            volume += (reference[0] - ms) * (acc - best)
            best = acc
    return volume


def mean_interval(values: list[float], *, seed: int = 0) -> Interval:
    """The mean of ``values`` (the point) and its 95% interval: a seeded percentile bootstrap
    (:func:`scipy.stats.bootstrap`); with fewer than 3 values, or all equal, their range."""
    mean = statistics.fmean(values)
    if len(values) < 3 or min(values) == max(values):
        return Interval(mean, min(values), max(values))
    import numpy as np
    from scipy.stats import bootstrap

    result = bootstrap((np.asarray(values, dtype=float),), np.mean, confidence_level=0.95, n_resamples=2000,
                       method="percentile", vectorized=True, axis=-1, rng=np.random.default_rng(seed))
    low, high = result.confidence_interval
    return Interval(mean, float(low), float(high))


@dataclass(frozen=True)
class TunerRow:
    """One sampler over several seeds.

    Attributes:
        sampler, seeds: Which, and how many seeds.
        best: Per checkpoint, the median over seeds of the best within-budget speedup; ``best_mean`` its mean
            with a 95% interval.
        hits: Seeds whose first 16 trials asked a configuration as fast as the grid's fastest within budget;
            ``hit_counts`` the same per checkpoint.
        hypervolume: The median hypervolume after the last checkpoint; ``hv`` per checkpoint, mean and interval.
        to_share: The median number of trials to reach :data:`HV_SHARE` of the grid's hypervolume (None: fewer
            than half of the seeds reached it within ``horizon`` trials); ``reached``: seeds that did.
    """

    sampler: str
    seeds: int
    best: dict[int, float]
    hits: int
    hypervolume: float
    best_mean: dict[int, Interval]
    hit_counts: dict[int, int]
    hv: dict[int, Interval]
    to_share: float | None
    reached: int
    horizon: int


def _history(replay: Replay, sampler: str, seed: int, trials: int, max_drop: float,
             reference_ms: float) -> list[Measurement]:
    """The recorded measurement of each configuration a sampler asks for, the sampler seeing the replay's answers."""
    return _replayed(replay, sampler, seed, trials, max_drop, reference_ms)[0]


def _replayed(replay: Replay, sampler: str, seed: int, trials: int, max_drop: float,
              reference_ms: float) -> tuple[list[Measurement], "optuna.Study"]:
    """:func:`_history` and the in-memory study that made it."""
    import optuna

    ideal = {c: float(m.info()["ideal"]) for c, m in replay.table.items()}
    study = optuna.create_study(directions=objectives.directions(objectives.DEFAULT), sampler=make_sampler(
        sampler, seed, replay.num_layers, replay.kv, max_drop=max_drop, ideal=ideal))
    references = References({TTFT.name: reference_ms})
    history = []

    def objective(trial: optuna.Trial) -> tuple[float, ...]:
        config = suggest_config(trial, replay.num_layers, replay.kv)
        answered = replay.answer(config)
        trial.set_constraint("max_drop", answered.drop_lower - max_drop)  # the study's constraint
        trial.set_user_attr("drop", answered.drop)  # as a study stores it
        trial.set_user_attr("drop_points", answered.drop_points)
        history.append(replay.table[config])
        return objectives.values_of(objectives.DEFAULT, answered, references)

    study.optimize(objective, n_trials=trials)
    return history, study


def implied_held(replay: Replay, *, max_drop: float, trials: int, seeds: int = 20, noise: bool = True
                 ) -> tuple[int, int]:
    """How many of the verdicts the structure-aware sampler's order implies after ``trials`` trials
    (:func:`poptune.tune.structured.implied_verdicts`, over ``seeds`` seeds) the grid's recorded figures bear
    out (implied within: the configuration is a candidate, :meth:`Measurement.candidate`; implied beyond: it
    is not): ``(held, implied)``."""
    import optuna

    from poptune.tune.structured import implied_verdicts, observations

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    reference = replay.reference_ms
    if reference is None:
        raise ConfigError(f"the replay of {replay.study_name!r} has no reference latency")
    held = total = 0
    for seed in range(seeds):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            _, study = _replayed(replay.noisy(seed if noise else None), "structured", seed, trials, max_drop,
                                 reference)
        seen = observations(study.trials, replay.num_layers, max_drop)
        for verdict in implied_verdicts(seen, replay.num_layers, replay.kv):
            total += 1
            held += verdict.within == replay.table[verdict.config].candidate(max_drop)
    return held, total


def _first_reach(points: list[tuple[float, float]], reference: tuple[float, float], goal: float) -> float:
    """The number of trials after which the hypervolume of ``points`` first reaches ``goal`` (inf: never)."""
    for n in range(1, len(points) + 1):
        if hypervolume(points[:n], reference) >= goal:
            return float(n)
    return math.inf


@dataclass(frozen=True)
class _Grid:
    """What the whole grid offers: the reference point, its hypervolume, the fastest within budget."""

    reference: tuple[float, float]
    volume: float
    target: float

    @classmethod
    def of(cls, replay: Replay, reference_ms: float, max_drop: float) -> "_Grid":
        configs = list(replay.table.values())
        reference = (reference_ms / min(m.speedup for m in configs) * 1.01,
                     min(m.objective_accuracy for m in configs) - 0.01)
        points = [(store.latency_objective(reference_ms, m.speedup), m.objective_accuracy) for m in configs]
        target = max((m.speedup for m in configs if m.candidate(max_drop)), default=math.inf)
        return cls(reference, hypervolume(points, reference), target)


def _sampler_row(replay: Replay, sampler: str, grid: _Grid, *, seeds: int, max_drop: float, reference_ms: float,
                 noise: bool, checkpoints: tuple[int, ...], horizon: int) -> TunerRow:
    import optuna

    bests: dict[int, list[float]] = {n: [] for n in checkpoints}
    volumes: dict[int, list[float]] = {n: [] for n in checkpoints}
    hit_counts = dict.fromkeys(checkpoints, 0)
    reach = []
    for seed in range(seeds):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            history = _history(replay.noisy(seed if noise else None), sampler, seed, max(horizon, *checkpoints),
                               max_drop, reference_ms)
        points = [(store.latency_objective(reference_ms, m.speedup), m.objective_accuracy) for m in history]
        for n in checkpoints:
            feasible = [m.speedup for m in history[:n] if m.candidate(max_drop)]
            bests[n].append(max(feasible, default=1.0))  # no candidate: the full model
            hit_counts[n] += any(s >= grid.target for s in feasible)
            volumes[n].append(hypervolume(points[:n], grid.reference))
        reach.append(_first_reach(points[:horizon], grid.reference, HV_SHARE * grid.volume))
    last = max(checkpoints)
    to_share = statistics.median(reach)
    return TunerRow(sampler, seeds, {n: statistics.median(v) for n, v in bests.items()},
                    hit_counts.get(16, hit_counts[last]), statistics.median(volumes[last]),
                    {n: mean_interval(v) for n, v in bests.items()}, hit_counts,
                    {n: mean_interval(v) for n, v in volumes.items()},
                    to_share if math.isfinite(to_share) else None, sum(math.isfinite(r) for r in reach), horizon)


def tuner_efficiency(replay: Replay, reference_ms: float | None = None, *, max_drop: float,
                     samplers: tuple[str, ...] = ("tpe", "nsga2", "random"), seeds: int = 10, noise: bool = False,
                     checkpoints: tuple[int, ...] = CHECKPOINTS, horizon: int | None = None) -> list[TunerRow]:
    """Each sampler over ``seeds`` on ``replay`` with an accuracy budget of ``max_drop`` points.

    Args:
        reference_ms: The latency objective's reference (default: the replay's).
        noise: Each seed's answers drawn from the recorded intervals under that seed (the scores stay recorded).
        checkpoints: Trials after which the best, the hits and the hypervolume are taken.
        horizon: Trials within which the hypervolume's :data:`HV_SHARE` is sought (default: the last checkpoint).

    Raises:
        ConfigError: an unknown sampler, no reference latency, no seeds, or a replay that is not a full grid.
    """
    import optuna

    unknown = [s for s in samplers if s not in TUNER_SAMPLERS]
    if unknown or not samplers:
        raise ConfigError(f"unknown sampler(s) {', '.join(unknown) or '(none)'}: use {', '.join(TUNER_SAMPLERS)}")
    reference_ms = reference_ms if reference_ms is not None else replay.reference_ms
    if reference_ms is None or reference_ms <= 0:
        raise ConfigError(f"the replay of {replay.study_name!r} has no reference latency")
    if seeds < 1 or not checkpoints or min(checkpoints) < 1:
        raise ConfigError(f"seeds and checkpoints must be positive, got {seeds} and {list(checkpoints)}")
    if not covers_grid(replay):
        missing = len(set(all_configs(replay.num_layers, replay.kv)) - set(replay.table))
        raise ConfigError(f"{replay.study_name!r} is not a full grid: {missing} configurations of the space are "
                          "not measured (samplers may ask any)")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    grid = _Grid.of(replay, reference_ms, max_drop)
    return [_sampler_row(replay, sampler, grid, seeds=seeds, max_drop=max_drop, reference_ms=reference_ms,
                         noise=noise, checkpoints=tuple(checkpoints), horizon=horizon or max(checkpoints))
            for sampler in samplers]
