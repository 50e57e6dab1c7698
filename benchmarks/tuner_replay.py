"""Benchmark: how fast each sampler finds the best configuration, on the replay of a fully enumerated grid.

1. ``--build``: run a grid study (every configuration measured once, for real) into ``--storage``.
2. Then, for each sampler and seed, an in-memory Optuna study asks configurations, the replay environment
   answers them from the stored grid (no model), and we record the best within-budget speedup after 8, 16
   and 32 trials, the hypervolume of the front found, and whether the grid's fastest within-budget
   configuration was among the first 16 trials.

Usage::

    python benchmarks/tuner_replay.py --build --model tiny-llama --tasks piqa --limit 8 \\
        --storage sqlite:///studies/grid-tiny.db --max-drop 1.0

Writes ``leaderboards/tuner-<study>.md``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shlex
import sys
import warnings
from pathlib import Path

import optuna

from poptune import store
from poptune.engine import BOUNDARIES
from poptune.env import ReplayEnv, TuningProblem
from poptune.env.problem import MAX_OFFSET
from poptune.evaluate.taskpack import data_dir
from poptune.tune import StudySpec, make_sampler, run_study

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINTS = (8, 16, 32)


def _grid_size(num_layers: int) -> int:
    return 1 + len(BOUNDARIES) * sum(num_layers - 1 - offset for offset in range(MAX_OFFSET + 1))


def _run(env: ReplayEnv, sampler: str, seed: int, trials: int, max_drop: float,
         reference_ms: float) -> list[tuple[float, ...]]:
    """(speedup, prefill ms, drop, accuracy) of each trial a sampler asks for, answered by the replay."""
    study = optuna.create_study(directions=["minimize", "maximize"], sampler=make_sampler(sampler, seed, env.num_layers))
    history = []

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        action = {"skip": trial.suggest_int("skip", 0, env.num_layers - 1),
                  "boundary": trial.suggest_categorical("boundary", list(BOUNDARIES)),
                  "offset": trial.suggest_int("offset", 0, MAX_OFFSET)}
        _, _, _, _, info = env.step(action)
        trial.set_constraint("max_drop", info["drop_points"] - max_drop)
        latency = reference_ms / info["speedup"]  # the study's latency objective (see poptune.tune)
        history.append((info["speedup"], latency, info["drop_points"], info["accuracy_mean"]))
        return latency, info["accuracy_mean"]

    study.optimize(objective, n_trials=trials)
    return history


def _hypervolume(points: list[tuple[float, float]], reference: tuple[float, float]) -> float:
    """2-D hypervolume of (prefill ms to minimise, accuracy to maximise) against ``reference``."""
    front = sorted({p for p in points if p[0] <= reference[0] and p[1] >= reference[1]})
    volume, best_acc = 0.0, reference[1]
    for ms, acc in front:  # by latency ascending: each adds the slab above the best accuracy so far
        if acc > best_acc:
            volume += (reference[0] - ms) * (acc - best_acc)
            best_acc = acc
    return volume


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", action="store_true", help="first run the grid study for real")
    parser.add_argument("--model", default="tiny-llama")
    parser.add_argument("--tasks", default="piqa")
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("--lengths", default="512")
    parser.add_argument("--storage", default="sqlite:///studies/grid.db")
    parser.add_argument("--max-drop", type=float, default=1.0)
    parser.add_argument("--samplers", default="tpe,nsga2,random")
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

    if args.build:
        directory = data_dir()
        problem = TuningProblem(model=args.model, tasks=tuple(args.tasks.split(",")), limit=args.limit,
                                data_dir=str(directory) if directory else None,
                                lengths=tuple(int(n) for n in args.lengths.split(",")), repeats=2, decode_tokens=0,
                                max_drop=args.max_drop)
        from poptune.env import ConfigEvaluator

        evaluator = ConfigEvaluator(problem)
        grid = _grid_size(evaluator.num_layers)
        # The grid sampler proposes every raw point once; clipped duplicates are answered from storage.
        raw = evaluator.num_layers * len(BOUNDARIES) * (MAX_OFFSET + 1)
        # Enqueued first trials are not grid ids: leave room; the grid sampler stops the study when exhausted.
        run_study(StudySpec(problem=problem, trials=raw + 8, sampler="grid", storage=args.storage), evaluator=evaluator)
        print(f"grid study built: {grid} distinct configurations, {raw} raw points")

    env = ReplayEnv(args.storage, max_drop=args.max_drop)
    configs = list(env.table.values())
    feasible = [m for m in configs if m.drop_points <= args.max_drop]
    reference_ms = store.load_study(store.open_storage(args.storage, heartbeat=None), None).user_attrs[
        "reference_prefill_ms"]
    target = max(feasible, key=lambda m: m.speedup)
    reference = (reference_ms / min(m.speedup for m in configs) * 1.01, min(m.accuracy_mean for m in configs) - 0.01)
    lines = [
        f"# Tuner efficiency on the replay of a full grid: {env.study_name}",
        "",
        f"Grid: {len(configs)} measured configurations; budget {args.max_drop} points; the fastest within budget is "
        f"`{target.config}` at {target.speedup:.3f}x (drop {target.drop_points:+.2f}).",
        "Each cell: median over seeds of the best within-budget speedup after N trials; hit@16 = seeds whose first 16 "
        "trials include a configuration as fast as the target; HV = hypervolume of (latency objective in ms, accuracy) "
        "after 32 trials.",
        "",
        "| sampler | seeds | " + " | ".join(f"best@{n}" for n in CHECKPOINTS) + " | hit@16 | HV@32 (median) |",
        "|---|---:|" + "---:|" * len(CHECKPOINTS) + "---:|---:|",
    ]
    for sampler in args.samplers.split(","):
        bests = {n: [] for n in CHECKPOINTS}
        hits, volumes = 0, []
        for seed in range(args.seeds):
            history = _run(env, sampler, seed, max(CHECKPOINTS), args.max_drop, reference_ms)
            for n in CHECKPOINTS:
                within = [s for s, _, d, _ in history[:n] if d <= args.max_drop]
                bests[n].append(max(within, default=float("nan")))
            hits += any(s >= target.speedup and d <= args.max_drop for s, _, d, _ in history[:16])
            volumes.append(_hypervolume([(ms, acc) for _, ms, _, acc in history], reference))
        median = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
        lines.append(f"| {sampler} | {args.seeds} | " + " | ".join(f"{median(bests[n]):.3f}x" for n in CHECKPOINTS)
                     + f" | {hits}/{args.seeds} | {median(volumes):.1f} |")
        print(lines[-1], flush=True)
    command = "python benchmarks/tuner_replay.py " + shlex.join(sys.argv[1:])
    hw = store.load_study(store.open_storage(args.storage, heartbeat=None), None).user_attrs.get("hardware", {})
    lines += ["", "## Provenance", "", f"- command: `{command.strip()}`",
              f"- date: {dt.datetime.now(dt.timezone.utc).isoformat(timespec='seconds')}",
              f"- grid measured on: {hw.get('hardware_id')}; replay needs no model", ""]
    safe = "".join(c if c.isalnum() or c in "-._" else "_" for c in env.study_name)
    out = ROOT / "leaderboards" / f"tuner-{safe}.md"
    out.write_text("\n".join(lines))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
