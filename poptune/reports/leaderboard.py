"""Leaderboards generated from stored studies: POP's front against every baseline, per model and machine.

For each POP study in a storage (one per ``<model>@<hardware-id>``) :func:`write_leaderboards` writes

- ``study-methods-<model>-<hardware>.md`` and ``.csv`` (named by :func:`poptune.files.result_name`): the full model,
  POP's Pareto front (and the paper's rule), and every stored baseline, with the prefill speedup at each timed
  length, the FLOPs ideal, decode speed, accuracy per task, mean and drop; for each baseline, POP's best accuracy at an
  equal or higher speedup beside it;
- ``study-methods-<model>-<hardware>.png``: speedup against accuracy, POP's front against every baseline (one
  study's search described; the decided comparison, same items and paired verdicts, is
  :mod:`poptune.comparison`'s ``methods-<model>-<hardware>``);
- ``tuner-<model>-<hardware>.md`` for a study that measured the whole search space: samplers x seeds on its
  replay.

Everything is read from the storage and ordered deterministically; the date in the provenance is the last
stored trial's, so the same database gives byte-identical files.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from poptune import store
from poptune.baselines.methods import METHODS
from poptune.baselines.methods import method as baseline_method
from poptune.errors import ConfigError
from poptune.interval import Interval
from poptune.objectives.accuracy import ACCURACY
from poptune.objectives.registry import DEFAULT, get, named
from poptune.store.trials import StoredTrial

if TYPE_CHECKING:
    import optuna

__all__ = ["Entry", "entries", "write_leaderboards"]

_ORDER = ("full", "pop", *METHODS)


@dataclass(frozen=True)
class Entry:
    """One row: a configuration of a method, as stored."""

    trial: int
    method: str
    label: str
    ratio: float
    speedup: dict[int, float]
    ideal: float
    decode_speedup: float | None
    accuracy: dict[str, float]
    accuracy_mean: float
    drop: float
    note: str = ""
    interval: dict[int, Interval] = field(default_factory=dict)  # the speedup with its 95% interval, by length
    noisy: bool = False
    energy: tuple[float | None, float | None] = (None, None)  # joules per prefill at the target length: POP, full
    energy_reason: str | None = "not measured (a trial stored before energy blocks)"
    drop_interval: Interval | None = None
    items: int | None = None
    values: dict[str, float] = field(default_factory=dict)  # the study's objectives by name, as stored

    @property
    def drop_cell(self) -> str:
        """The drop with its paired 95% interval where stored."""
        return f"{self.drop:+.2f}" + (f" {self.drop_interval.bracket('+.2f')}" if self.drop_interval else "")


def _entry(trial: StoredTrial, num_layers: int, note: str = "", confirmed: dict[str, Any] | None = None,
           objectives: tuple[str, ...] = DEFAULT) -> Entry:
    method, config, details = trial.method, trial.config, trial.details
    target = str(trial.target_length)
    row = trial.latency[target]
    full_decode, decode = row.get("decode_full_ms_per_token"), row.get("decode_pop_ms_per_token")
    if method == "pop" and config.skip == 0:
        method, label, ratio = "full", "full model", 0.0
    elif method == "pop":
        label, ratio = config.title, config.skip / num_layers
    else:
        label, ratio = baseline_method(method).label(details, num_layers)
    latency = {int(k): dict(v) for k, v in trial.latency.items()}
    if confirmed:  # the confirmation pass's figures at the target length
        latency[int(target)].update({k: confirmed[k] for k in ("speedup", "speedup_lo", "speedup_hi")})
    return Entry(
        trial=trial.number, method=method, label=label, ratio=ratio,
        speedup={k: float(v["speedup"]) for k, v in sorted(latency.items())},
        ideal=float(row["ideal"]),
        decode_speedup=row.get("decode_speedup") or (full_decode / decode if full_decode and decode else None),
        accuracy=dict(trial.accuracy), accuracy_mean=float(trial.accuracy_mean), drop=float(trial.drop_points),
        note=note,
        interval={k: ci for k, v in latency.items() if (ci := Interval.from_fields(v, "speedup")) is not None},
        noisy=trial.noisy,
        energy=(row.get("energy_pop_j"), row.get("energy_full_j")),
        energy_reason=row["energy_reason"] if "energy_pop_j" in row else Entry.energy_reason,
        drop_interval=trial.drop_ci,
        items=trial.items,
        values=named(objectives, trial.values),
    )


def entries(study: "optuna.Study") -> list[Entry]:
    """The rows of a study's leaderboard: full model, POP's front and paper rule, then baselines by method."""
    from poptune.problem.space import paper_default

    stored = store.StoredStudy.of(study)
    num_layers, objectives = stored.num_layers, stored.objectives
    trials = [StoredTrial.of(t) for t in store.completed(study, method=None)]
    front = {row.trial for row in store.front(study)}
    confirmed = store.confirmations(study)
    paper = paper_default(num_layers)
    rows: dict[tuple, Entry] = {}
    for trial in (t for t in trials if t.is_pop):
        is_paper = trial.config == paper
        if trial.number in front or trial.config.skip == 0 or is_paper:
            note = " ".join(n for n, on in (("front", trial.number in front), ("paper rule", is_paper)) if on)
            entry = _entry(trial, num_layers, note, confirmed.get(str(trial.number)), objectives)
            rows.setdefault((entry.method, entry.label), entry)  # a configuration answered again: once
    for trial in (t for t in trials if not t.is_pop):
        entry = _entry(trial, num_layers, objectives=objectives)
        rows.setdefault((entry.method, entry.label), entry)
    rank = {m: i for i, m in enumerate(_ORDER)}
    return sorted(rows.values(), key=lambda e: (rank.get(e.method, len(rank)), e.ratio, e.trial))


def _best_pop_at(entries_: list[Entry], speedup: float, length: int) -> Entry | None:
    """POP's most accurate front configuration at least as fast as ``speedup``."""
    faster = [e for e in entries_ if e.method == "pop" and "front" in e.note and e.speedup[length] >= speedup]
    return max(faster, key=lambda e: (e.accuracy_mean, e.speedup[length], -e.trial), default=None)


_IMPLAUSIBLE, _SLACK = "†", 0.10


def _flag(entry: Entry, length: int, target: int) -> str:
    """``†`` on a speedup (at the target length, where the ideal is known) implausibly above the FLOPs ideal: with
    an interval, its lower end above the ideal (see :mod:`poptune.measure.nullcheck`); else 10% above it."""
    if length != target:
        return ""
    if length in entry.interval:
        from poptune.measure.nullcheck import above_ideal

        return _IMPLAUSIBLE if above_ideal(entry.interval[length].lo, entry.ideal) else ""
    return _IMPLAUSIBLE if entry.speedup[length] > (1 + _SLACK) * entry.ideal else ""


def _speedup_cell(entry: Entry, length: int, target: int) -> str:
    """``1.234x [1.210, 1.251]`` (the 95% interval where the trial has one)."""
    cell = f"{entry.speedup[length]:.3f}x"
    if length in entry.interval:
        cell += f" {entry.interval[length].bracket('.3f')}"
    return cell + _flag(entry, length, target)


def _joules(energy: tuple[float | None, float | None]) -> str:
    pop, full = energy
    return "-" if pop is None or full is None else f"{pop:.3g}/{full:.3g}"


def _fmt(value: float | None, spec: str) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def _provenance(study: "optuna.Study", command: str) -> list[str]:
    from poptune.measure.provenance import Provenance

    stored = store.StoredStudy.of(study)
    problem = stored.problem
    dates = [t.datetime_complete for t in store.completed(study, method=None) if t.datetime_complete]
    tasks = ", ".join(problem.get("tasks", []))
    measured = (
        f"measured with: tasks {tasks}, {problem.get('limit') or 'all'} items per task (evenly spaced), prompt "
        f"lengths {problem.get('lengths')} "
        f"(target {problem.get('target_length') or problem.get('lengths', [None])[0]}), "
        f"{problem.get('repeats')} timing pairs per configuration, batch {problem.get('batch_size')}, "
        f"device {problem.get('device')}, dtype {problem.get('dtype') or 'default'}, weights {problem.get('weights')}")
    last = max(dates).isoformat(timespec="seconds") if dates else "none"
    made = Provenance(command=command, hardware=stored.hardware, versions=stored.versions, date=last)
    return made.lines([f"study: `{study.study_name}`", measured], date_note=" (the last measurement)")


def _versus(e: Entry, rows: list[Entry], target: int) -> tuple[str, Any]:
    """A baseline's POP cell (Markdown, CSV): POP's most accurate front configuration at least as fast."""
    if e.method in ("pop", "full"):
        return "", ""
    best = _best_pop_at(rows, e.speedup[target], target)
    if best is None:
        return "none as fast", ""
    lead = 100 * (best.accuracy_mean - e.accuracy_mean)
    return f"{100 * best.accuracy_mean:.2f} ({lead:+.2f}) [{best.label}]", round(100 * best.accuracy_mean, 4)


def _tables(study: "optuna.Study", rows: list[Entry], command: str, plot: str) -> tuple[str, str]:
    stored = store.StoredStudy.of(study)
    problem = stored.problem
    lengths = sorted(rows[0].speedup) if rows else []
    target = _target(study, lengths)
    tasks = list(problem["tasks"])
    extra = [get(n) for n in stored.objectives if n not in DEFAULT]  # TTFT and accuracy: speedup and mean
    head = (["method", "configuration"] + [f"speedup@{n}" for n in lengths] + [f"ideal@{target}", "decode speedup"]
            + [o.label for o in extra] + tasks
            + ["mean", "drop [95% CI]", "items", f"J/prefill@{target} POP/full", f"POP at >= speedup@{target}",
               "trial"])
    md = [f"# Methods on {study.study_name}", "",
          "POP (prefill-only pruning, this study's Pareto front) against structured-pruning baselines, measured by "
          "the same evaluator: the same prompts, lengths, timer (measured/full pairs interleaved in one process, "
          "speedup = median of per-pair ratios, with its 95% bootstrap interval over pairs where stored), tasks and "
          "items. Accuracy in %, drop in points against the full "
          "model (positive = worse), paired over the same items with its 95% bootstrap interval where stored. The "
          "POP column gives, for each baseline, the most accurate POP front "
          "configuration at least as fast, and its accuracy lead.", "",
          "| " + " | ".join(head) + " |", "|" + "---|" * 2 + "---:|" * (len(head) - 2)]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(head[:-5] + ["drop", "drop_lo", "drop_hi", "items", head[-3], "pop_at_speedup_accuracy", "trial"])
    for e in rows:
        versus, csv_versus = _versus(e, rows, target)
        name = e.method + (f" ({e.note})" if e.note else "")
        md.append("| " + " | ".join(
            [name, e.label] + [_speedup_cell(e, n, target) for n in lengths] + [f"{e.ideal:.2f}x",
             _fmt(e.decode_speedup, ".3f") + ("x" if e.decode_speedup else "")]
            + [o.cell(e.values[o.name]) if o.name in e.values else "–" for o in extra]
            + [f"{100 * e.accuracy[t]:.2f}" for t in tasks] + [f"{100 * e.accuracy_mean:.2f}", e.drop_cell,
                                                              str(e.items or ""), _joules(e.energy), versus,
                                                              str(e.trial)]) + " |")
        writer.writerow([e.method, e.label] + [round(e.speedup[n], 5) for n in lengths] + [round(e.ideal, 5),
                        round(e.decode_speedup, 5) if e.decode_speedup else ""]
                        + [round(e.values[o.name], 6) if o.name in e.values else "" for o in extra]
                        + [round(100 * e.accuracy[t], 4) for t in tasks]
                        + [round(100 * e.accuracy_mean, 4), round(e.drop, 4)]
                        + ([round(v, 4) for v in e.drop_interval.ends()] if e.drop_interval else ["", ""])
                        + [e.items or "", _joules(e.energy), csv_versus, e.trial])
    if any(_flag(e, target, target) for e in rows):
        md += ["", f"{_IMPLAUSIBLE} measured speedup more than {_SLACK:.0%} above the FLOPs ideal: the machine was "
               "busy with other work during that measurement, so its pairs were perturbed; read it as noise."]
    reasons = sorted({e.energy_reason for e in rows if e.energy_reason})
    if reasons:
        md += ["", "J/prefill (NVML energy block per side, the whole batch): '-' where not measured: "
                   f"{'; '.join(reasons)}."]
    md += ["", f"![speedup vs accuracy]({plot})", ""] + _provenance(study, command)
    return "\n".join(md), buf.getvalue()


def _target(study: "optuna.Study", lengths: list[int]) -> int:
    """The timed prompt length of the objective (a workload-weighted study's: its longest timed length)."""
    target = store.StoredStudy.of(study).timed_length
    return target if not lengths or target in lengths else lengths[-1]


def _plot(study: "optuna.Study", rows: list[Entry], path: Path) -> Path:
    from poptune.plots import pareto_plot

    target = _target(study, sorted(rows[0].speedup) if rows else [])
    objectives = store.StoredStudy.of(study).objectives
    points = [(t.speedup, 100 * named(objectives, t.values).get(ACCURACY.name, t.objective_accuracy), "")
              for t in map(StoredTrial.of, store.completed(study))]
    front = [(e.speedup[target], 100 * e.accuracy_mean, e.label.replace(", offset ", "/o").replace("skip ", ""))
             for e in rows if "front" in e.note]
    series: dict[str, list[tuple[float, float, str]]] = {}
    for e in rows:
        if e.method not in ("pop", "full"):
            series.setdefault(e.method, []).append((e.speedup[target], 100 * e.accuracy_mean, ""))
    return pareto_plot(points, front, path, title=f"{study.study_name}: POP front vs baselines", series=series)


def write_leaderboards(storage: str | None, out_dir: str | Path, *, command: str,
                       seeds: int = 10) -> list[Path]:
    """Regenerate the leaderboards of every POP study in ``storage`` under ``out_dir``; returns the files.

    Raises:
        ConfigError: a bad storage, a missing folder, or a storage without any POP study.
    """
    import optuna

    from poptune.problem.replay import Replay, covers_grid
    from poptune.tune.efficiency import CHECKPOINTS, tuner_efficiency

    out = Path(out_dir)
    if not out.is_dir():
        raise ConfigError(f"{out} is not an existing folder")
    from poptune.files import check_writable_folder

    check_writable_folder(out)  # a read-only folder fails before any table is computed
    opened = store.open_reader(storage)
    studies = [optuna.load_study(study_name=n, storage=opened) for n in store.study_names(opened)]
    studies = [s for s in studies if store.StoredStudy.of(s).recorded and store.completed(s)]
    for study in studies:  # every study's trials before any board is written
        store.check_trials(study)
    if not studies:
        raise ConfigError(f"no POP study with completed trials in {store.public_url(storage)}")
    from poptune.files import result_name, write_text

    written: list[Path] = []
    for study in studies:
        rows = entries(study)
        base = out / result_name("study-methods", study.study_name)
        md, table = _tables(study, rows, command, f"{base.name}.png")
        write_text(f"{base}.md", md.rstrip("\n"))
        write_text(f"{base}.csv", table.rstrip("\n"))
        written += [Path(f"{base}.md"), Path(f"{base}.csv"), _plot(study, rows, Path(f"{base}.png"))]
        replay = Replay.of(study)
        if not covers_grid(replay):
            continue
        budget = replay.max_drop if replay.max_drop is not None else 1.0
        reference = store.reference_ms(study)
        assert reference is not None  # a study that covers the grid has measured
        tuner = tuner_efficiency(replay, float(reference), max_drop=budget, seeds=seeds)
        lines = [f"# Tuner efficiency on the replay of {study.study_name}", "",
                 f"Every configuration of the search space was measured ({len(replay.table)}); samplers ask, the "
                 f"replay answers. Budget {budget} points. Each cell: median over seeds of the best within-budget "
                 "speedup after N trials; hit@16 = seeds whose first 16 trials found the fastest within-budget "
                 "configuration; HV = hypervolume of (latency objective in ms, accuracy) after 32 trials.", "",
                 "| sampler | seeds | " + " | ".join(f"best@{n}" for n in CHECKPOINTS) + " | hit@16 | HV@32 |",
                 "|---|---:|" + "---:|" * len(CHECKPOINTS) + "---:|---:|"]
        for r in tuner:
            lines.append(f"| {r.sampler} | {r.seeds} | " + " | ".join(_fmt(r.best[n], ".3f") + "x" for n in CHECKPOINTS)
                         + f" | {r.hits}/{r.seeds} | {r.hypervolume:.2f} |")
        lines += [""] + _provenance(study, command)
        path = out / f"{result_name('tuner', study.study_name)}.md"
        write_text(str(path), "\n".join(lines).rstrip("\n"))
        written.append(path)
    return written
