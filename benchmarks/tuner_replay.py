"""Benchmark: how fast each sampler finds good configurations, on the replay of a fully measured grid (no model).

Two sources of the grid:

- ``--grid PATH``: a grid file (CSV, written by ``benchmarks/build_grid.py``; no database). Defaults: every
  sampler of :data:`poptune.tune.replay.TUNER_SAMPLERS` (TPE, NSGA-II, random, the grid in a seeded order,
  Optuna's GP sampler, the structure-aware sampler of :mod:`poptune.tune.structured`), 20 seeds, the file's
  accuracy budget, 64 trials to look for 95% of the hypervolume.
- ``--storage URL`` (``--build`` first runs a grid study for real into it): a stored grid study, as before
  (TPE, NSGA-II and random, 10 seeds, budget 1.0 points).

Then :func:`poptune.tune.replay.tuner_efficiency`: per sampler and seed an in-memory Optuna study asks, the
replay answers (``--noise``: drawn from each figure's recorded 95% interval, one draw per seed and
configuration), and the asked configurations are scored by their recorded figures: the best within-budget
speedup, the hit rate and the hypervolume after 8, 16 and 32 trials (means over seeds with 95% bootstrap
intervals), and the trials needed to reach 95% of the grid's hypervolume. For a grid file it also counts where
the grid breaks the order the structure-aware sampler assumes (:func:`poptune.tune.structured.order_violations`)
and how many of the verdicts that sampler implies after 16 trials the recorded figures bear out
(:func:`poptune.tune.replay.implied_held`).

Usage::

    python benchmarks/tuner_replay.py --grid leaderboards/grid-gemma-3-270m-<hardware>.csv --noise
    python benchmarks/tuner_replay.py --build --model tiny-llama --tasks piqa --limit 8 \\
        --storage sqlite:///studies/grid-tiny.db --max-drop 1.0

Writes ``leaderboards/tuner-<grid or study>.md`` (or ``--out``). A missing or malformed grid file, or a grid
that does not cover the search space, is one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shlex
import sys
import time
import warnings
from pathlib import Path

from poptune.errors import PoptuneError

ROOT = Path(__file__).resolve().parents[1]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--grid", help="a grid file (CSV) to replay: no database needed")
    source.add_argument("--storage", help="a stored grid study (default route: sqlite:///studies/grid.db)")
    parser.add_argument("--build", action="store_true", help="first run the grid study for real into --storage")
    parser.add_argument("--model", default="tiny-llama")
    parser.add_argument("--tasks", default="piqa")
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("--lengths", default="512")
    parser.add_argument("--max-drop", type=float, help="accuracy budget in points (default: the grid's; 1.0 for "
                        "a storage)")
    parser.add_argument("--samplers", help="comma-separated (default: all five for --grid, tpe,nsga2,random else)")
    parser.add_argument("--seeds", type=int, help="seeds per sampler (default: 20 for --grid, 10 else)")
    parser.add_argument("--noise", action="store_true", help="answers drawn from the recorded intervals (seeded)")
    parser.add_argument("--horizon", type=int, help="trials within which 95%% of the grid's hypervolume is sought "
                        "(default: 64 for --grid, 32 else)")
    parser.add_argument("--out", help="the Markdown file to write (default: leaderboards/tuner-<name>.md)")
    return parser


def _build(args: argparse.Namespace) -> None:
    from poptune.engine import BOUNDARIES
    from poptune.evaluate.taskpack import data_dir
    from poptune.tune.evaluator import ConfigEvaluator
    from poptune.tune.problem import MAX_OFFSET, TuningProblem
    from poptune.tune.study import StudySpec, run_study

    directory = data_dir()
    problem = TuningProblem(model=args.model, tasks=tuple(args.tasks.split(",")), limit=args.limit,
                            data_dir=str(directory) if directory else None,
                            lengths=tuple(int(n) for n in args.lengths.split(",")), repeats=2, decode_tokens=0,
                            max_drop=args.max_drop)
    evaluator = ConfigEvaluator(problem)
    raw = evaluator.num_layers * len(BOUNDARIES) * (MAX_OFFSET + 1)  # room enough: the grid sampler stops the study
    run_study(StudySpec(problem=problem, trials=raw + 8, sampler="grid", storage=args.storage), evaluator=evaluator)


def _source(args: argparse.Namespace):
    """The replay, its provenance lines, and the route's defaults filled into ``args``."""
    from poptune import store
    from poptune.tune.problem import DEFAULT_MAX_DROP
    from poptune.tune.replay import TUNER_SAMPLERS, Replay

    if args.grid:
        replay = Replay.from_csv(args.grid)
        defaults = dict(samplers=",".join(TUNER_SAMPLERS), seeds=20, horizon=64,
                        max_drop=replay.max_drop if replay.max_drop is not None else DEFAULT_MAX_DROP)
        first = next(iter(replay.table.values()))
        where = [f"- grid file: `{args.grid}` ({len(replay.table)} configurations, measured on "
                 f"{first.hardware.get('hardware_id')}; versions {', '.join(f'{k} {v}' for k, v in first.versions.items())})"]
    else:
        args.storage = args.storage or "sqlite:///studies/grid.db"
        if args.build:
            args.max_drop = 1.0 if args.max_drop is None else args.max_drop
            _build(args)
        study = store.load_study(store.open_reader(args.storage), None)  # the storage, opened once
        replay = Replay.of(study)
        defaults = dict(samplers="tpe,nsga2,random", seeds=10, horizon=32, max_drop=1.0)
        where = [f"- grid study: `{study.study_name}` in {store.public_url(args.storage)}, measured on "
                 f"{study.user_attrs.get('hardware', {}).get('hardware_id')}"]
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return replay, where


def _cell(i) -> str:
    return f"{i.mean:.3f} [{i.lo:.3f}, {i.hi:.3f}]"


def _verdicts(rows, checkpoints) -> list[str]:
    """Where a sampler's interval lies wholly above random search's, or that none does."""
    random_row = next((r for r in rows if r.sampler == "random"), None)
    if random_row is None:
        return ["No random-search row to compare with."]
    lines = []
    for r in rows:
        for n in checkpoints:
            for what, ours, theirs in (("best", r.best_mean[n], random_row.best_mean[n]),
                                       ("hypervolume", r.hv[n], random_row.hv[n])):
                if r is not random_row and ours.above(theirs):
                    lines.append(f"- {r.sampler} beats random search on {what}@{n}: {_cell(ours)} vs {_cell(theirs)}")
                elif r is not random_row and theirs.above(ours):
                    lines.append(f"- random search beats {r.sampler} on {what}@{n}: {_cell(theirs)} vs {_cell(ours)}")
    return lines or ["- No sampler's interval lies wholly above or below random search's, at any budget, on the best "
                     "candidate's speedup or the hypervolume: on this grid none beats random search by more than "
                     "its interval."]


def _hits(hits: int, seeds: int) -> str:
    """``hits/seeds`` with the rate's 95% Wilson score interval."""
    z, p = 1.959964, hits / seeds
    centre, half = (p + z * z / (2 * seeds)), z * (p * (1 - p) / seeds + z * z / (4 * seeds * seeds)) ** 0.5
    scale = 1 + z * z / seeds
    return f"{hits}/{seeds} [{max(centre - half, 0) / scale:.2f}, {min(centre + half, scale) / scale:.2f}]"


def _order(replay, args) -> list[str]:
    """Where the grid breaks the order, and how many implied verdicts held."""
    from poptune.tune.replay import implied_held
    from poptune.tune.structured import order_violations

    lines = []
    for what, family_only in (("one family (boundary, offset, K/V source; `skip` ascending)", True),
                              ("the whole order (skipped blocks nested, boundaries nested)", False)):
        v = order_violations(replay.table, replay.num_layers, args.max_drop, family_only=family_only)
        lines.append(f"- {what}: {v.pairs} ordered pairs; a shallower configuration decided beyond the budget "
                     f"(drop lo > {args.max_drop:g}) while a deeper one is decided within (drop hi <= "
                     f"{args.max_drop:g}): **{v.decided}**; drop intervals wholly inverted: **{v.separated}**; by "
                     f"the drop points alone (noise included): {v.point}. The grid decides {v.decided_within} "
                     f"configurations within and {v.decided_beyond} beyond, so the first count can see little.")
    held, implied = implied_held(replay, max_drop=args.max_drop, trials=16, seeds=args.seeds, noise=args.noise)
    lines.append(f"- Verdicts the structure-aware sampler implies after 16 trials (never counted as measured), "
                 f"checked against the recorded figures (candidate or not), over {args.seeds} seeds: {held} of "
                 f"{implied} held ({held / max(implied, 1):.0%}).")
    return lines


def _markdown(replay, rows, args, where: list[str], seconds: float) -> str:
    from poptune.tune.replay import CHECKPOINTS, HV_SHARE

    feasible = [m for m in replay.table.values() if m.candidate(args.max_drop)]
    target = max(feasible, key=lambda m: m.speedup, default=None)
    fastest = "no configuration is a candidate" if target is None else (
        f"the fastest candidate is skip {target.config.skip}, {target.config.boundary}, offset {target.config.offset} "
        f"at {target.speedup:.3f}x (drop {target.drop_points:+.2f} [{target.drop_lower:+.2f}, "
        f"{float(target.drop['hi']):+.2f}])")
    ns = " | ".join(f"@{n}" for n in CHECKPOINTS)
    lines = [
        f"# Tuner efficiency on the replay of {replay.study_name}", "",
        f"Grid: {len(replay.table)} measured configurations (the whole search space); budget {args.max_drop:g} points. "
        "A search can only hand candidates to certification on fresh items (docs/statistics.md): a candidate is "
        "not rejected (the drop's 95% lower end within the budget) and its drop so far is within it; the table "
        f"scores samplers by the candidates they find; {fastest}.",
        "Answers: " + ("drawn from each configuration's recorded 95% intervals (normal, sigma = half-width / 1.96 on "
                       "each side, clipped to the interval; one draw per seed and configuration)." if args.noise
                       else "the recorded figures (no noise)."),
        f"{args.seeds} seeds per sampler; every trial counts (a configuration asked twice too); the configurations "
        "asked are scored by their recorded figures. Cells: mean over seeds [95% bootstrap interval]; a seed that "
        "found no candidate scores 1.0x (the full model).", "",
        "## Best candidate's speedup after N trials", "",
        f"| sampler | {ns} |", "|---|" + "---:|" * len(CHECKPOINTS)]
    lines += [f"| {r.sampler} | " + " | ".join(_cell(r.best_mean[n]) for n in CHECKPOINTS) + " |" for r in rows]
    lines += ["", "## Hit rate: seeds that asked a configuration as fast as the fastest candidate", "",
              f"| sampler | {ns} |", "|---|" + "---:|" * len(CHECKPOINTS)]
    lines += [f"| {r.sampler} | " + " | ".join(_hits(r.hit_counts[n], r.seeds) for n in CHECKPOINTS) + " |"
              for r in rows]
    lines += ["", f"## Hypervolume of (latency objective ms, accuracy) after N trials, and trials to "
              f"{HV_SHARE:.0%} of the grid's", "",
              f"| sampler | {ns} | trials to {HV_SHARE:.0%} (median) | seeds that reached it |",
              "|---|" + "---:|" * (len(CHECKPOINTS) + 2)]
    for r in rows:
        reach = f"{r.to_share:g}" if r.to_share is not None else f"> {r.horizon}"
        lines.append(f"| {r.sampler} | " + " | ".join(_cell(r.hv[n]) for n in CHECKPOINTS)
                     + f" | {reach} | {r.reached}/{r.seeds} within {r.horizon} |")
    lines += ["", "## Against random search", ""] + _verdicts(rows, CHECKPOINTS)
    if args.grid and "structured" in args.samplers.split(","):
        lines += ["", "## The order on this grid", ""] + _order(replay, args)
    command = "python benchmarks/tuner_replay.py " + shlex.join(sys.argv[1:])
    lines += ["", "## Provenance", "", f"- command: `{command.strip()}`",
              f"- date: {dt.datetime.now(dt.timezone.utc).isoformat(timespec='seconds')}; replay wall time "
              f"{seconds:.0f} s (no model)", *where, ""]
    return "\n".join(lines)


def run(argv: list[str] | None = None) -> Path:
    import optuna

    from poptune.files import check_writable_file, safe_name, write_text
    from poptune.tune.replay import tuner_efficiency

    args = _parser().parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    if args.out:
        check_writable_file(args.out)
    replay, where = _source(args)
    out = Path(args.out) if args.out else ROOT / "leaderboards" / f"tuner-{safe_name(replay.study_name)}.md"
    started = time.monotonic()
    rows = tuner_efficiency(replay, max_drop=args.max_drop, samplers=tuple(args.samplers.split(",")),
                            seeds=args.seeds, noise=args.noise, horizon=args.horizon)
    for r in rows:
        print(f"{r.sampler}: best@16 {_cell(r.best_mean[16]) if 16 in r.best_mean else '-'}, hits@16 {r.hits}/{r.seeds}, "
              f"trials to 95% HV {r.to_share if r.to_share is not None else '> ' + str(r.horizon)}", flush=True)
    write_text(out, _markdown(replay, rows, args, where, time.monotonic() - started))
    print(f"wrote {out}")
    return out


def main(argv: list[str] | None = None) -> int:
    try:
        run(argv)
    except PoptuneError as e:
        print(f"tuner_replay: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
