"""Benchmark: how fast each sampler finds the best configuration, on the replay of a fully enumerated grid.

1. ``--build``: run a grid study (every configuration measured once, for real) into ``--storage``.
2. Then :func:`poptune.tune.replay.tuner_efficiency`: for each sampler and seed an in-memory Optuna
   study asks configurations, the replay environment answers them from the stored grid (no model); the best
   within-budget speedup after 8, 16 and 32 trials, the hypervolume of the front found, and whether the
   grid's fastest within-budget configuration was among the first 16 trials. (``poptune leaderboard`` writes
   the same table for every grid study in a storage.)

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
from poptune.tune.problem import MAX_OFFSET, TuningProblem
from poptune.tune.replay import CHECKPOINTS, Replay, tuner_efficiency
from poptune.evaluate.taskpack import data_dir
from poptune.files import safe_name
from poptune.tune.study import StudySpec, run_study

ROOT = Path(__file__).resolve().parents[1]


def _grid_size(num_layers: int) -> int:
    return 1 + len(BOUNDARIES) * sum(num_layers - 1 - offset for offset in range(MAX_OFFSET + 1))


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

    study = store.load_study(store.open_reader(args.storage), None)  # the storage, opened once
    env = Replay.of(study)
    configs = list(env.table.values())
    feasible = [m for m in configs if m.drop_points <= args.max_drop]
    reference_ms = store.reference_ms(study)
    target = max(feasible, key=lambda m: m.speedup)
    rows = tuner_efficiency(env, reference_ms, max_drop=args.max_drop, samplers=tuple(args.samplers.split(",")),
                            seeds=args.seeds)
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
    for row in rows:
        lines.append(f"| {row.sampler} | {row.seeds} | " + " | ".join(f"{row.best[n]:.3f}x" for n in CHECKPOINTS)
                     + f" | {row.hits}/{row.seeds} | {row.hypervolume:.1f} |")
        print(lines[-1], flush=True)
    command = "python benchmarks/tuner_replay.py " + shlex.join(sys.argv[1:])
    hw = study.user_attrs.get("hardware", {})
    lines += ["", "## Provenance", "", f"- command: `{command.strip()}`",
              f"- date: {dt.datetime.now(dt.timezone.utc).isoformat(timespec='seconds')}",
              f"- grid measured on: {hw.get('hardware_id')}; replay needs no model", ""]
    out = ROOT / "leaderboards" / f"tuner-{safe_name(env.study_name)}.md"
    out.write_text("\n".join(lines))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
