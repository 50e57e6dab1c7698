"""How fast each sampler finds good configurations, on the replay of a fully measured (grid) study.

For each sampler and seed an in-memory Optuna study asks configurations and :class:`ReplayEnv` answers them
from the stored grid (no model, seconds on a CPU): the best within-budget speedup after 8, 16 and 32 trials,
whether the grid's fastest within-budget configuration was among the first 16, and the hypervolume of
(latency objective, accuracy) after 32 trials. Seeded samplers make the table reproducible.
"""

from __future__ import annotations

import statistics
import warnings
from dataclasses import dataclass

from poptune.env.pop_env import ReplayEnv
from poptune.tune.space import all_configs, suggest_config

__all__ = ["CHECKPOINTS", "TunerRow", "covers_grid", "hypervolume", "tuner_efficiency"]

CHECKPOINTS = (8, 16, 32)


@dataclass(frozen=True)
class TunerRow:
    """One sampler over several seeds: medians of the best within-budget speedup at each checkpoint."""

    sampler: str
    seeds: int
    best: dict[int, float]
    hits: int
    hypervolume: float


def covers_grid(env: ReplayEnv) -> bool:
    """Whether the stored study measured every configuration of the search space."""
    return set(all_configs(env.num_layers)) <= set(env.table)


def hypervolume(points: list[tuple[float, float]], reference: tuple[float, float]) -> float:
    """2-D hypervolume of (prefill ms to minimise, accuracy to maximise) against ``reference``."""
    front = sorted({p for p in points if p[0] <= reference[0] and p[1] >= reference[1]})
    volume, best = 0.0, reference[1]
    for ms, acc in front:  # by latency ascending: each adds the slab above the best accuracy so far
        if acc > best:
            volume += (reference[0] - ms) * (acc - best)
            best = acc
    return volume


def _history(env: ReplayEnv, sampler: str, seed: int, trials: int, max_drop: float,
             reference_ms: float) -> list[tuple[float, float, float, float]]:
    """(speedup, latency objective ms, drop, accuracy) of each trial a sampler asks for."""
    import optuna

    from poptune.tune.study import make_sampler

    study = optuna.create_study(directions=["minimize", "maximize"],
                                sampler=make_sampler(sampler, seed, env.num_layers))
    history = []

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        config = suggest_config(trial, env.num_layers)
        _, _, _, _, info = env.step({"skip": config.skip, "boundary": config.boundary, "offset": config.offset})
        trial.set_constraint("max_drop", info["drop_points"] - max_drop)
        latency = reference_ms / info["speedup"]  # the study's latency objective (see poptune.tune.study)
        history.append((info["speedup"], latency, info["drop_points"], info["accuracy_mean"]))
        return latency, info["accuracy_mean"]

    study.optimize(objective, n_trials=trials)
    return history


def tuner_efficiency(env: ReplayEnv, reference_ms: float, *, max_drop: float,
                     samplers: tuple[str, ...] = ("tpe", "nsga2", "random"), seeds: int = 10) -> list[TunerRow]:
    """Each sampler's medians over ``seeds`` on the replay ``env`` with an accuracy budget of ``max_drop``."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    configs = list(env.table.values())
    target = max((m.speedup for m in configs if m.drop_points <= max_drop), default=float("inf"))
    reference = (reference_ms / min(m.speedup for m in configs) * 1.01, min(m.accuracy_mean for m in configs) - 0.01)
    rows = []
    for sampler in samplers:
        bests: dict[int, list[float]] = {n: [] for n in CHECKPOINTS}
        hits, volumes = 0, []
        for seed in range(seeds):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                history = _history(env, sampler, seed, max(CHECKPOINTS), max_drop, reference_ms)
            for n in CHECKPOINTS:
                bests[n].append(max((s for s, _, d, _ in history[:n] if d <= max_drop), default=float("nan")))
            hits += any(s >= target and d <= max_drop for s, _, d, _ in history[:16])
            volumes.append(hypervolume([(ms, acc) for _, ms, _, acc in history], reference))
        rows.append(TunerRow(sampler, seeds, {n: statistics.median(v) for n, v in bests.items()}, hits,
                             statistics.median(volumes)))
    return rows
