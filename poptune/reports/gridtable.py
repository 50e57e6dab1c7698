"""The grid benchmark's files: every configuration's figures as a small CSV table, and the README beside it.

A grid study (measured, continued or read as stored by :func:`poptune.tune.gridstudy.grid_study`, the job behind
``poptune grid``) is written here: :func:`write` puts ``<out>/grid-<model>-<hardware>.csv``
(:mod:`poptune.problem.grid`) and ``grid-<model>-<hardware>.md`` beside it (:func:`readme`): how it was measured, its
progress (a partial grid is marked so), the commands, the wall time, how to cite. By default the grid's journal file
lies beside them (:func:`poptune.tune.gridstudy.storage_of`), the raw record of the table. docs/grid.md says how to
read it. Nothing here measures.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING, Any

from poptune.kv import registry as kv_registry
from poptune.measure.provenance import Provenance, typed_command
from poptune.problem.problem import TuningProblem
from poptune.store.attributes import StoredStudy

if TYPE_CHECKING:
    import optuna

__all__ = ["readme", "write"]


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


def _checks(attrs: "StoredStudy") -> str:
    """What the study's A/A checks and re-measures say."""
    checks = attrs.null_checks
    if not checks:
        return "no A/A null check (run with --no-confirm)"
    failed = sum(bool(c.get("noisy")) for c in checks)
    return (f"{len(checks)} A/A null checks (full model against itself) at the runs' starts and ends, {failed} too "
            "noisy; noisy trials re-timed and the front confirmed")


def _record(storage: str | None, csv_path: Path, resumable: bool = True) -> str:
    """Where the raw record of the table lies, for its README (``resumable``: whether a run may resume it,
    :func:`poptune.tune.resume.check_problem`)."""
    from poptune import store

    if storage and storage.startswith("journal:"):
        path = Path(storage.removeprefix("journal:"))
        folder = path.parent.resolve()
        where = (f"`{path.name}` beside this file" if folder == csv_path.parent.resolve()
                 else f"`raw/{path.name}` beside this file" if folder == (csv_path.parent / "raw").resolve()
                 else f"`{path}`")
        return (f"an Optuna journal file, {where}: the raw record (every trial with its per-item outcomes, timing "
                "pairs and null checks; `optuna trials --storage-class JournalFileBackend` and optuna-dashboard read "
                "it), " + ("from which the same command resumes on a machine of this hardware id" if resumable else
                           "stored before lm-eval's items kept their own index (schema 2): read, not resumed"))
    return f"`{store.public_url(storage)}`" if storage else "its study storage"


def _coverage(rows: list[dict[str, str]], space: list[Any], trial_s: list[float]) -> list[str]:
    """A partial grid's progress: configurations measured per skip, and what the rest would take."""
    measured = {(int(r["skip"]), r["boundary"], int(r["offset"]), r.get("kv") or kv_registry.DEFAULT) for r in rows}
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
        made = Provenance.from_dict(r)  # its command as typed, its commit
        until = r.get("finished") or (f"{end} (interrupted: its last trial's end)" if end else "interrupted")
        lines.append(f"{i}. {start or '?'} to {until}, commit "
                     f"`{made.commit or '?'}`: `{made.command or typed_command([], program=None)}`; {aa_text}")
    return lines


def _verdict_counts(rows: list[dict[str, str]], budget: float | None) -> str:
    """How many rows are within, beyond and undecided against ``budget`` on their drop's interval."""
    if budget is None:
        return "no budget"
    within = sum(float(r["drop_hi"] or r["drop"]) <= budget for r in rows)
    beyond = sum(float(r["drop_lo"] or r["drop"]) > budget for r in rows)
    return (f"{within} within (upper end <= {budget:g}), {beyond} beyond (lower end > {budget:g}), "
            f"{len(rows) - within - beyond} undecided, of {len(rows)} trusted rows")


def _state(attrs: "StoredStudy", rows: list[dict[str, str]]) -> dict[str, Any]:
    """What the README's sections share: the problem, the space, the runs and their spans, the trials' times."""
    from poptune import store
    from poptune.problem.space import all_configs

    p = TuningProblem.from_dict(attrs.problem)
    space = all_configs(attrs.num_layers, p.kv)
    trusted = [r for r in rows if r["noisy"] != "1"]  # a measurement that failed a null check is never ranked
    feasible = [r for r in trusted if p.max_drop is None or float(r["drop_hi"] or r["drop"]) <= p.max_drop]
    return {"p": p, "space": space, "total": len(space), "trusted": trusted, "partial": len(rows) < len(space),
            "fastest": sorted(feasible, key=lambda r: -float(r["speedup"]))[:5], "hw": attrs.hardware,
            "budget": "no budget" if p.max_drop is None else f"{p.max_drop:g} points on the drop's 95% upper bound",
            "runs": attrs.runs, "store": store}


def _measured(study: Any, csv_path: Path, rows: list[dict[str, str]], s: dict[str, Any], storage: str | None,
              ) -> list[str]:
    """The title, what the table holds, and how it was measured."""
    attrs, p, hw = StoredStudy.of(study), s["p"], s["hw"]
    made = Provenance(hardware=hw, versions=attrs.versions, model=attrs.model,
                      weights_fingerprint=attrs.weights_fingerprint)
    state = ("complete: every configuration of the space" if len(rows) >= s["total"] else
             f"PARTIAL: {len(rows)} of {s['total']} configurations; run the command again to continue")
    return [
        f"# Grid: every POP configuration of {attrs.model} on {hw.get('hardware_id')}", "",
        f"`{csv_path.name}`: {len(rows)} rows ({state}), one per configuration of the canonical search space "
        f"(`poptune.problem.space.all_configs`, {attrs.num_layers} layers: skip 0..{attrs.num_layers - 1}, "
        "offset 0..2 where the block fits, 5 boundaries; skip 0 is the full model).", "",
        "## How it was measured", "",
        f"- A study (`poptune.tune.study.run_study`) with the `grid` sampler, {s['total']} trials (study "
        f"`{study.study_name}`), stored in {_record(storage, csv_path, not attrs.unindexed_tasks)}; each configuration "
        "measured once, as any study trial.",
        f"- Workload: tasks {', '.join(p.tasks)}; items per task raced in rounds from {p.items_start} up to "
        f"{p.limit} until the drop's interval was decided against the budget ({s['budget']}); the drop is the paired "
        "mean difference against the full model on the same items. Its 95% interval is recomputed from the "
        "journal's per-item outcomes whenever this table is written, by the current method: the score test "
        "(`docs/statistics.md`; `poptune.store.redecide`), read as one look at the trial's items because these "
        "trials were stored before their races' designs were. Verdicts against the "
        f"budget now: {_verdict_counts(s['trusted'], p.max_drop)}. The trials themselves were raced with the former "
        "bootstrap interval, which closed at [0, 0] when no item flipped: the rows it let stop early as within "
        "the budget now read undecided on their 32 items.",
        f"- Latency: paired POP/full time to first token at the workload's prompt-length quantiles "
        f"({attrs.latency_points}: [length, share]), combined by share into the expected TTFT speedup; at "
        f"least {p.repeats} pairs, " + (f"on until the interval is +-{p.precision:.0%} (at most {p.max_pairs} pairs, "
                                        f"{p.max_seconds:g} s per length)" if p.precision else "no more")
        + "; the speedup's interval is the one stored when the trial was timed (a seeded bootstrap of the median "
        "pair ratio, the pairs' range below 3 pairs; 3-5 pairs cover the median 75-94% of the time, not 95%: the "
        "current order-statistic interval needs the raw pairs, kept in the journal).",
        f"- Model {made.model} (weights {p.weights}, fingerprint `{made.weights_fingerprint}`), device "
        f"{p.device}, dtype {p.dtype or 'default'}; {made.sentence()}.",
        f"- Trust: {_checks(attrs)}; `noisy` = 1 where a null check failed and no trusted re-measure replaced it; "
        f"state reuse checked against the plain forward ({attrs.state_reuse_check}).", "",
    ]


def _columns_and_fastest(study: Any, rows: list[dict[str, str]], s: dict[str, Any]) -> list[str]:
    """The columns, a partial grid's progress, and the fastest configurations within the budget."""
    trials = [s["store"].StoredTrial.of(t) for t in s["store"].completed(study)]
    seconds = [t.seconds for t in trials if t.measured]
    return [
        "## Columns", "",
        "`skip, boundary, offset, kv` the configuration; `speedup, speedup_lo, speedup_hi` the expected-TTFT speedup "
        "and its 95% interval; `ideal` the FLOPs-only speedup; `drop, drop_lo, drop_hi` the accuracy drop in points "
        "and its 95% interval; `accuracy` the study's accuracy objective; `items` items scored; `pairs` timing pairs; "
        "`ttft_ms, full_ttft_ms, reference_ms, target_length` the raw latencies and the objective's reference; "
        "`noisy`; `model, num_layers, max_drop, hardware, versions` (see `poptune/problem/grid.py`).", "",
        *(_coverage(rows, s["space"], seconds) if s["partial"] else []),
        f"## Fastest within the budget ({s['budget']})" + (f", among the {len(rows)} measured" if s["partial"] else ""),
        "",
        f"{len(rows) - len(s['trusted'])} row(s) marked `noisy` are not ranked." if len(s["trusted"]) < len(rows) else
        "Every row passed its null checks.", "",
        "| skip | boundary | offset | speedup [95%] | drop [95%] | items |", "|---:|---|---:|---:|---:|---:|",
        *[f"| {r['skip']} | {r['boundary']} | {r['offset']} | {_range(r, 'speedup', '.3f')} | "
          f"{_range(r, 'drop', '+.2f')} | {r['items']} |" for r in s["fastest"]], "",
    ]


def _commands_and_cite(study: Any, csv_path: Path, command: str, s: dict[str, Any]) -> list[str]:
    """The runs and their wall time, how to replay the table, how to cite it."""
    attrs, runs, hw = StoredStudy.of(study), s["runs"], s["hw"]
    spans = _spans(runs, study)
    wall = sum(_seconds(start, end) for start, end in spans)
    trial_s = sum(s["store"].StoredTrial.of(t).seconds for t in s["store"].completed(study))
    commit = next((made.commit for made in map(Provenance.from_dict, reversed(runs)) if made.commit), None)
    dates = f"{(spans[0][0] or '?')[:10]} to {(spans[-1][1] or '?')[:10]}" if runs else "?"
    return [
        "## Commands and wall time", "",
        f"Wall time {_hours(wall)} over {len(runs)} run(s) (each run's start to finish, measured {dates}); the "
        f"trials themselves {_hours(trial_s)}. The runs, each resuming the stored grid:", "",
        *_runs(runs, spans, attrs.null_checks), "",
        f"This table was written by `{command}`.", "",
        "## Replay it", "",
        f"`Replay.from_csv('{csv_path.name}')` (`poptune.problem.replay`), `gymnasium.make('poptune/POP-Replay-v0', "
        f"grid='{csv_path.name}', noise=True)`, and `poptune tuners --grid {csv_path.name} --noise` "
        "read this file directly. With noise, a speedup or drop is drawn normal around its recorded value with "
        "sigma = half-width / 1.96 on each side, clipped to the recorded 95% interval (seeded).", "",
        "## How to cite", "",
        f"```\n@misc{{poptune_{csv_path.stem.replace('-', '_')},\n  title = {{poptune grid table: every prefill-only "
        f"pruning configuration of {attrs.model} on {hw.get('hardware_id')}}},\n  howpublished = {{poptune "
        f"leaderboards/{csv_path.name}}},\n  note = {{poptune {attrs.versions.get('poptune', '?')}"
        f"{', commit ' + commit if commit else ''}; measured {dates}}}\n}}\n```", "",
    ]


def readme(study: optuna.Study, csv_path: Path, rows: list[dict[str, str]], command: str,
           storage: str | None = None) -> str:
    """The README of a grid table: what it holds, how it was measured, the command, the wall time, how to cite."""
    s = _state(StoredStudy.of(study), rows)
    return "\n".join(_measured(study, csv_path, rows, s, storage) + _columns_and_fastest(study, rows, s)
                     + _commands_and_cite(study, csv_path, command, s))


def write(study: optuna.Study, out: str | Path, command: str, storage: str | None = None) -> tuple[Path, Path]:
    """The grid table of ``study`` (stored in ``storage``) and its README in ``out``; returns both paths."""
    from poptune.files import safe_name, write_text
    from poptune.problem.grid import grid_rows, write_grid

    attrs = StoredStudy.of(study)
    hardware = attrs.hardware_id or "unknown"
    base = Path(out) / f"grid-{safe_name(str(attrs.model))}-{safe_name(hardware)}"
    csv_path, md_path = base.with_suffix(".csv"), base.with_suffix(".md")
    write_grid(study, csv_path)
    write_text(md_path, readme(study, csv_path, grid_rows(study), command, storage).rstrip("\n"))
    return csv_path, md_path
