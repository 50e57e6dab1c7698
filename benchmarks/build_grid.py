"""Benchmark: measure every configuration of the search space on this machine, and write it as a small table.

The grid is a study (:func:`poptune.tune.study.run_study`) with the ``grid`` sampler and as many trials as the
canonical space has configurations (:func:`poptune.tune.space.all_configs`: 241 for Gemma-3-270M's 18
layers), on the study's default workload (``poptune study``'s own options and defaults: with a data directory
the long-prompt pack, else the embedded synthetic tasks). It is stored in an Optuna journal file, by default
``leaderboards/grid-<model>-<hardware>.journal``: the raw record of the table (every trial with its per-item
outcomes, timing pairs and null checks), small enough to commit, so that the same command continues where it
stopped on any machine of the same hardware id, a fresh clone included (an interrupted trial is measured again;
a complete grid returns at once; run one process per grid: it times the A/A checks, re-times noisy trials and
confirms the front as a study on SQLite does). Then, from the stored study, it writes
``<out>/grid-<model>-<hardware>.csv`` (:mod:`poptune.tune.grid`) and ``grid-<model>-<hardware>.md`` beside it:
how it was measured, its progress, the commands, the wall time, how to cite. ``--table-only`` writes them from what is stored, measuring nothing (a partial grid is
marked so).

Usage::

    python benchmarks/build_grid.py --model gemma-3 --data-dir ../shared/data --kv own  # the real grid (hours)
    python benchmarks/build_grid.py --model gemma-3 --data-dir ../shared/data --kv own --table-only  # seconds
    python benchmarks/build_grid.py --model tiny-llama --tasks passkey --lengths 256 --limit 2 --items 2 \\
        --repeats 1 --precision 0 --no-confirm --storage sqlite:////tmp/grid-smoke.db --out /tmp  # smoke: ~4 min

The real grid costs about a minute or two per configuration on a 2-core CPU (the long-prompt trials of the
default study took 58-222 s each): several hours, so run it where it may be interrupted and resumed, and commit
the journal between runs (a machine of this project keeps no file across sessions).

A bad option or data directory is one line on stderr and exit 2, before anything is measured or written.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from poptune.cli._args import add_model, add_preset, add_problem, add_storage, problem
from poptune.errors import PoptuneError

ROOT = Path(__file__).resolve().parents[1]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model(parser)
    add_preset(parser)
    add_problem(parser)
    add_storage(parser, study="<model>@<hardware-id>")
    parser.add_argument("--no-confirm", action="store_true",
                        help="skip the A/A checks, the re-measures of noisy trials and the confirmation pass")
    parser.add_argument("--timeout", type=float, help="stop starting trials after this many seconds (resume later)")
    parser.add_argument("--out", default=str(ROOT / "leaderboards"), help="folder of the table and its README "
                        "(default: leaderboards/)")
    parser.add_argument("--table-only", action="store_true",
                        help="write the table and its README from the stored grid, measuring nothing")
    return parser


def default_storage(model: str, device: str) -> str:
    """The grid's journal file in ``leaderboards/``: one per model and hardware id, committed with its table."""
    from poptune.files import safe_name
    from poptune.measure.hardware import fingerprint
    from poptune.models import resolve_model

    name = f"grid-{safe_name(resolve_model(model).name)}-{safe_name(fingerprint(device).hardware_id)}"
    return f"journal:{ROOT / 'leaderboards' / name}.journal"


def _name(args: argparse.Namespace, spec_problem: Any) -> str:
    """The grid study's name: ``--study``, else ``<model>@<hardware-id>`` of this machine."""
    from poptune.tune.study import StudySpec, study_name_of

    return study_name_of(StudySpec(problem=spec_problem, trials=1, study=args.study))


def _find(args: argparse.Namespace, spec_problem: Any) -> Any:
    """The grid study of ``args`` as stored (no model loaded), or None where the storage holds none.

    A storage that cannot be opened (no database file yet) raises ``ConfigError``.
    """
    from poptune import store

    name = _name(args, spec_problem)
    reader = store.open_reader(args.storage)
    return store.load_study(reader, name) if name in store.study_names(reader) else None


def _num_layers(args: argparse.Namespace, spec_problem: Any) -> tuple[int, Any]:
    """The model's layers: from the stored study when there is one (no model loaded), else a loaded evaluator."""
    from poptune.errors import ConfigError
    from poptune.tune.evaluator import ConfigEvaluator

    try:
        study = _find(args, spec_problem)
    except ConfigError:  # no database yet
        study = None
    if study is not None and "num_layers" in study.user_attrs:
        return int(study.user_attrs["num_layers"]), None
    evaluator = ConfigEvaluator(spec_problem)
    return evaluator.num_layers, evaluator


def _progress(total: int) -> Any:
    from poptune import store
    from poptune.cli.study import trial_line

    started = time.monotonic()

    def finished(study: Any, trial: Any) -> None:
        import optuna

        if trial.state != optuna.trial.TrialState.COMPLETE:
            return
        measured = sum(store.StoredTrial.of(t).measured for t in store.completed(study))
        print(f"[{measured}/{total}, {time.monotonic() - started:.0f} s] {trial_line(store.StoredTrial.of(trial))}",
              flush=True)

    return finished


def measure(args: argparse.Namespace) -> Any:
    """Run (or continue) the grid study of ``args``; returns it."""
    import optuna

    from poptune import store
    from poptune.files import check_writable_folder
    from poptune.tune.space import all_configs
    from poptune.tune.study import StudySpec, run_study

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    spec_problem = problem(args)  # bad options and data fail here, in one line
    check_writable_folder(args.out)
    args.storage = args.storage or default_storage(args.model, spec_problem.device)
    store.check_storage(args.storage)
    if args.table_only:
        return stored(args, spec_problem)
    num_layers, evaluator = _num_layers(args, spec_problem)
    total = len(all_configs(num_layers, spec_problem.kv))
    spec = StudySpec(problem=spec_problem, trials=total, sampler="grid", storage=args.storage, study=args.study,
                     seed=args.seed, timeout=args.timeout, confirm=not args.no_confirm, sole_worker=True)
    print(f"grid of {total} configurations ({num_layers} layers) in {store.public_url(args.storage)}", flush=True)
    return run_study(spec, evaluator=evaluator, callbacks=[_progress(total)])


def stored(args: argparse.Namespace, spec_problem: Any) -> Any:
    """The grid study of ``args`` as stored (no model loaded).

    Raises:
        ConfigError: the storage holds no such study, or one made with other settings.
    """
    from poptune import store
    from poptune.errors import ConfigError
    from poptune.tune.study import check_problem

    study = _find(args, spec_problem)  # a missing database file raises its own message
    if study is None:
        raise ConfigError(f"no grid study {_name(args, spec_problem)!r} in {store.public_url(args.storage)}: "
                          "run without --table-only to measure it")
    check_problem(study, spec_problem)
    return study


def _seconds(iso_from: str | None, iso_to: str | None) -> float:
    if not iso_from or not iso_to:
        return 0.0
    return (dt.datetime.fromisoformat(iso_to) - dt.datetime.fromisoformat(iso_from)).total_seconds()


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min"


def _range(row: dict[str, str], key: str, spec: str) -> str:
    """``value [lo, hi]`` of a grid row's figure (the value alone where it has no interval)."""
    lo, hi = row[f"{key}_lo"], row[f"{key}_hi"]
    value = format(float(row[key]), spec)
    return value + (f" [{format(float(lo), spec)}, {format(float(hi), spec)}]" if lo and hi else "")


def _checks(attrs: dict[str, Any]) -> str:
    """What the study's A/A checks and re-measures say."""
    checks = attrs.get("null_checks", [])
    if not checks:
        return "no A/A null check (run with --no-confirm)"
    failed = sum(bool(c.get("noisy")) for c in checks)
    return (f"{len(checks)} A/A null checks (full model against itself) at the runs' starts and ends, {failed} too "
            "noisy; noisy trials re-timed and the front confirmed")


def _record(storage: str | None, csv_path: Path) -> str:
    """Where the raw record of the table lies, for its README."""
    from poptune import store

    if storage and storage.startswith("journal:"):
        path = Path(storage.removeprefix("journal:"))
        where = f"`{path.name}` beside this file" if path.parent.resolve() == csv_path.parent.resolve() else f"`{path}`"
        return (f"an Optuna journal file, {where}: the raw record (every trial with its per-item outcomes, timing "
                "pairs and null checks; `optuna trials --storage-class JournalFileBackend` and optuna-dashboard read "
                "it), from which the same command resumes on a machine of this hardware id")
    return f"`{store.public_url(storage)}`" if storage else "its study storage"


def _coverage(rows: list[dict[str, str]], space: list[Any], trial_s: list[float]) -> list[str]:
    """A partial grid's progress: configurations measured per skip, and what the rest would take."""
    measured = {(int(r["skip"]), r["boundary"], int(r["offset"]), r.get("kv") or "own") for r in rows}
    skips = sorted({c.skip for c in space})
    cells = []
    for skip in skips:
        of_skip = [c for c in space if c.skip == skip]
        done = sum((c.skip, c.boundary, c.offset, c.kv) in measured for c in of_skip)
        cells.append(f"{skip}: {done}/{len(of_skip)}")
    left = len(space) - len(rows)
    mean = sum(trial_s) / len(trial_s) if trial_s else 0.0
    return ["## Progress", "", f"Measured per skip: {', '.join(cells)}. {left} configurations remain: at this "
            f"grid's mean of {mean:.0f} s per measured trial, about {_hours(left * mean)} more.", ""]


def _spans(runs: list[dict[str, Any]], study: Any) -> list[tuple[str, str | None]]:
    """Each run's start and end: its recorded finish, else (interrupted) its last completed trial's end."""
    ends = sorted(t.datetime_complete.astimezone(dt.timezone.utc).isoformat(timespec="seconds")
                  for t in study.get_trials(deepcopy=False) if t.datetime_complete is not None)
    spans = []
    for i, r in enumerate(runs):
        start, after = r.get("started") or "", (runs[i + 1].get("started") if i + 1 < len(runs) else None) or "9999"
        last = max((e for e in ends if start <= e < after), default=None)
        spans.append((start, r.get("finished") or last))
    return spans


def _runs(runs: list[dict[str, Any]], spans: list[tuple[str, str | None]], checks: list[dict[str, Any]]) -> list[str]:
    """One line per run of the grid: when, which commit and command, its A/A checks."""
    lines = []
    for i, (r, (start, end)) in enumerate(zip(runs, spans), start=1):
        after = spans[i][0] if i < len(spans) else "9999"
        aa = [c for c in checks if start <= (c.get("date") or "") < after]
        aa_text = "; ".join(f"A/A {c['when']} {c['speedup']:.3f} [{c['lo']:.3f}, {c['hi']:.3f}] "
                            f"{'NOISY' if c.get('noisy') else 'ok'}" for c in aa) or "no A/A check"
        command = " ".join(r.get("command") or []) or "?"
        until = r.get("finished") or (f"{end} (interrupted: its last trial's end)" if end else "interrupted")
        lines.append(f"{i}. {start or '?'} to {until}, commit "
                     f"`{r.get('git_commit') or '?'}`: `python {command}`; {aa_text}")
    return lines


def _verdict_counts(rows: list[dict[str, str]], budget: float | None) -> str:
    """How many rows are within, beyond and undecided against ``budget`` on their drop's interval."""
    if budget is None:
        return "no budget"
    within = sum(float(r["drop_hi"] or r["drop"]) <= budget for r in rows)
    beyond = sum(float(r["drop_lo"] or r["drop"]) > budget for r in rows)
    return (f"{within} within (upper end <= {budget:g}), {beyond} beyond (lower end > {budget:g}), "
            f"{len(rows) - within - beyond} undecided, of {len(rows)} trusted rows")


def readme(study: Any, csv_path: Path, rows: list[dict[str, str]], command: str, storage: str | None = None) -> str:
    """The README of a grid table: what it holds, how it was measured, the command, the wall time, how to cite."""
    from poptune import store
    from poptune.tune.problem import TuningProblem
    from poptune.tune.space import all_configs

    attrs = study.user_attrs
    p = TuningProblem.from_dict(attrs["problem"])
    total = len(all_configs(int(attrs["num_layers"]), p.kv))
    runs = attrs.get("runs", [])
    spans = _spans(runs, study)
    wall = sum(_seconds(start, end) for start, end in spans)
    space = all_configs(int(attrs["num_layers"]), p.kv)
    trials = [store.StoredTrial.of(t) for t in store.completed(study)]
    seconds = [t.seconds for t in trials if t.measured]
    trial_s = sum(t.seconds for t in trials)
    budget = "no budget" if p.max_drop is None else f"{p.max_drop:g} points on the drop's 95% upper bound"
    trusted = [r for r in rows if r["noisy"] != "1"]  # a measurement that failed a null check is never ranked
    feasible = [r for r in trusted if p.max_drop is None or float(r["drop_hi"] or r["drop"]) <= p.max_drop]
    fastest = sorted(feasible, key=lambda r: -float(r["speedup"]))[:5]
    partial = len(rows) < total
    hw = attrs.get("hardware", {})
    versions = ", ".join(f"{k} {v}" for k, v in sorted(attrs.get("versions", {}).items()))
    commit = next((r.get("git_commit") for r in reversed(runs) if r.get("git_commit")), None)
    name = csv_path.stem
    dates = f"{(spans[0][0] or '?')[:10]} to {(spans[-1][1] or '?')[:10]}" if runs else "?"
    state = ("complete: every configuration of the space" if len(rows) >= total else
             f"PARTIAL: {len(rows)} of {total} configurations; run the command again to continue")
    lines = [
        f"# Grid: every POP configuration of {attrs.get('model')} on {hw.get('hardware_id')}", "",
        f"`{csv_path.name}`: {len(rows)} rows ({state}), one per configuration of the canonical search space "
        f"(`poptune.tune.space.all_configs`, {attrs['num_layers']} layers: skip 0..{int(attrs['num_layers']) - 1}, "
        "offset 0..2 where the block fits, 5 boundaries; skip 0 is the full model).", "",
        "## How it was measured", "",
        f"- A study (`poptune.tune.study.run_study`) with the `grid` sampler, {total} trials (study "
        f"`{study.study_name}`), stored in {_record(storage, csv_path)}; each configuration measured once, as any "
        "study trial.",
        f"- Workload: tasks {', '.join(p.tasks)}; items per task raced in rounds from {p.items_start} up to "
        f"{p.limit} until the drop's interval was decided against the budget ({budget}); the drop is the paired "
        "mean difference against the full model on the same items. Its 95% interval is recomputed from the "
        "journal's per-item outcomes whenever this table is written, by the current method: the anytime-valid "
        "betting confidence sequence (`docs/statistics.md`; `poptune.store.redecide`). Verdicts against the "
        f"budget now: {_verdict_counts(trusted, p.max_drop)}. The trials themselves were raced with the former "
        "bootstrap interval, which closed at [0, 0] when no item flipped: the rows it let stop early as within "
        "the budget now read undecided on their 32 items.",
        f"- Latency: paired POP/full time to first token at the workload's prompt-length quantiles "
        f"({attrs.get('latency_points')}: [length, share]), combined by share into the expected TTFT speedup; at "
        f"least {p.repeats} pairs, " + (f"on until the interval is +-{p.precision:.0%} (at most {p.max_pairs} pairs, "
                                        f"{p.max_seconds:g} s per length)" if p.precision else "no more")
        + "; the speedup's interval is the one stored when the trial was timed (a seeded bootstrap of the median "
        "pair ratio, the pairs' range below 3 pairs; 3-5 pairs cover the median 75-94% of the time, not 95%: the "
        "current order-statistic interval needs the raw pairs, kept in the journal).",
        f"- Model {attrs.get('model')} (weights {p.weights}, fingerprint `{attrs.get('weights_fingerprint')}`), device "
        f"{p.device}, dtype {p.dtype or 'default'}; hardware {hw.get('hardware_id')} ({hw.get('name', '')}); {versions}.",
        f"- Trust: {_checks(attrs)}; `noisy` = 1 where a null check failed and no trusted re-measure replaced it; "
        f"state reuse checked against the plain forward ({attrs.get('state_reuse_check')}).", "",
        "## Columns", "",
        "`skip, boundary, offset, kv` the configuration; `speedup, speedup_lo, speedup_hi` the expected-TTFT speedup "
        "and its 95% interval; `ideal` the FLOPs-only speedup; `drop, drop_lo, drop_hi` the accuracy drop in points "
        "and its 95% interval; `accuracy` the study's accuracy objective; `items` items scored; `pairs` timing pairs; "
        "`ttft_ms, full_ttft_ms, reference_ms, target_length` the raw latencies and the objective's reference; "
        "`noisy`; `model, num_layers, max_drop, hardware, versions` (see `poptune/tune/grid.py`).", "",
        *(_coverage(rows, space, seconds) if partial else []),
        f"## Fastest within the budget ({budget})" + (f", among the {len(rows)} measured" if partial else ""), "",
        f"{len(rows) - len(trusted)} row(s) marked `noisy` are not ranked." if len(trusted) < len(rows) else
        "Every row passed its null checks.", "",
        "| skip | boundary | offset | speedup [95%] | drop [95%] | items |", "|---:|---|---:|---:|---:|---:|",
        *[f"| {r['skip']} | {r['boundary']} | {r['offset']} | {_range(r, 'speedup', '.3f')} | "
          f"{_range(r, 'drop', '+.2f')} | {r['items']} |" for r in fastest], "",
        "## Commands and wall time", "",
        f"Wall time {_hours(wall)} over {len(runs)} run(s) (each run's start to finish, measured {dates}); the "
        f"trials themselves {_hours(trial_s)}. The runs, each resuming the stored grid:", "",
        *_runs(runs, spans, attrs.get("null_checks", [])), "",
        f"This table was written by `{command}`.", "",
        "## Replay it", "",
        f"`Replay.from_csv('{csv_path.name}')` (`poptune.tune.replay`), `gymnasium.make('poptune/POP-Replay-v0', "
        f"grid='{csv_path.name}', noise=True)`, and `python benchmarks/tuner_replay.py --grid {csv_path.name} --noise` "
        "read this file directly. With noise, a speedup or drop is drawn normal around its recorded value with "
        "sigma = half-width / 1.96 on each side, clipped to the recorded 95% interval (seeded).", "",
        "## How to cite", "",
        f"```\n@misc{{poptune_{name.replace('-', '_')},\n  title = {{poptune grid table: every prefill-only pruning "
        f"configuration of {attrs.get('model')} on {hw.get('hardware_id')}}},\n  howpublished = {{poptune "
        f"leaderboards/{csv_path.name}}},\n  note = {{poptune {attrs.get('versions', {}).get('poptune', '?')}"
        f"{', commit ' + commit if commit else ''}; measured {dates}}}\n}}\n```", "",
    ]
    return "\n".join(lines)


def write(study: Any, out: str | Path, command: str, storage: str | None = None) -> tuple[Path, Path]:
    """The grid table of ``study`` (stored in ``storage``) and its README in ``out``; returns both paths."""
    from poptune.files import safe_name, write_text
    from poptune.tune.grid import grid_rows, write_grid

    hardware = study.user_attrs.get("hardware", {}).get("hardware_id", "unknown")
    base = Path(out) / f"grid-{safe_name(str(study.user_attrs.get('model')))}-{safe_name(hardware)}"
    csv_path, md_path = base.with_suffix(".csv"), base.with_suffix(".md")
    write_grid(study, csv_path)
    write_text(md_path, readme(study, csv_path, grid_rows(study), command, storage).rstrip("\n"))
    return csv_path, md_path


def main(argv: list[str] | None = None) -> int:
    from poptune.tune.interrupt import exit_code, interruptible

    args = _parser().parse_args(argv)
    command = "python benchmarks/build_grid.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    try:
        with interruptible():
            study = measure(args)
        csv_path, md_path = write(study, args.out, command, args.storage)
    except PoptuneError as e:
        print(f"build_grid: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        print(f"build_grid: interrupted; the measured trials are stored in {args.storage}: run the same command to "
              "continue", file=sys.stderr)
        return exit_code(e)
    print(f"wrote {csv_path}\nwrote {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
