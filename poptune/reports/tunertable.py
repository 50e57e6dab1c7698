"""The tuner table: how fast each sampler finds good configurations, on the replay of a fully measured grid.

Two sources of the grid (:class:`TunerSpec`):

- ``grid``: a grid file (CSV, written by ``poptune grid``; no database). Defaults: every sampler of
  :data:`poptune.tune.efficiency.TUNER_SAMPLERS` (TPE, NSGA-II, random, the grid in a seeded order, Optuna's GP
  sampler, the structure-aware sampler of :mod:`poptune.tune.structured`), 20 seeds, the file's accuracy budget,
  64 trials to look for 95% of the hypervolume.
- ``storage`` (``build`` first runs a grid study for real into it: :func:`poptune.tune.gridstudy.replay_grid`): a
  stored grid study (TPE, NSGA-II and random, 10 seeds, budget 1.0 points).

Then :func:`poptune.tune.efficiency.tuner_efficiency`: per sampler and seed an in-memory Optuna study asks, the
replay answers (``noise``: drawn from each figure's recorded 95% interval, one draw per seed and configuration),
and the asked configurations are scored by their recorded figures: the best within-budget speedup, the hit rate
and the hypervolume after 8, 16 and 32 trials (means over seeds with 95% bootstrap intervals), and the trials
needed to reach 95% of the grid's hypervolume. For a grid file it also counts where the grid breaks the order the
structure-aware sampler assumes (:func:`poptune.tune.structured.order_violations`) and how many of the verdicts
that sampler implies after 16 trials the recorded figures bear out (:func:`poptune.tune.efficiency.implied_held`).
:func:`tuner_table` writes it all as Markdown (default: ``leaderboards/tuner-replay-<model>-<hardware>.md``).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from poptune.errors import ConfigError
from poptune.interval import Interval

__all__ = ["TunerSpec", "default_name", "summary_line", "tuner_table"]


@dataclass(frozen=True)
class TunerSpec:
    """One tuner comparison. ``None`` fields take their route's defaults (:func:`_source`).

    Attributes:
        grid: A grid file (CSV) to replay: no database needed.
        storage: A stored grid study (default when ``grid`` is None: ``sqlite:///studies/grid.db``).
        build: First run the grid study for real into ``storage`` (on ``model``, ``tasks``, ``limit``, ``lengths``).
        model, tasks, limit, lengths: The workload of ``build``.
        max_drop: Accuracy budget in points (default: the grid's; 1.0 for a storage).
        samplers: Samplers compared (default: all of them for a grid file, ``tpe,nsga2,random`` else).
        seeds: Seeds per sampler (default: 20 for a grid file, 10 else).
        noise: Answers drawn from the recorded intervals (seeded).
        horizon: Trials within which 95% of the grid's hypervolume is sought (default: 64 for a grid file, 32 else).
        out: The Markdown file to write (default: :func:`default_name` in ``leaderboards/`` of
            the current directory).
    """

    grid: str | None = None
    storage: str | None = None
    build: bool = False
    model: str = "tiny-llama"
    tasks: tuple[str, ...] = ("piqa",)
    limit: int = 8
    lengths: tuple[int, ...] = (512,)
    max_drop: float | None = None
    samplers: tuple[str, ...] | None = None
    seeds: int | None = None
    noise: bool = False
    horizon: int | None = None
    out: str | None = None

    def __post_init__(self) -> None:
        if self.grid is not None and self.storage is not None:
            raise ConfigError("give a grid file (`--grid`) or a stored grid study (`--storage`), not both")
        if self.build and self.grid is not None:
            raise ConfigError("`--build` measures a grid study into `--storage`; it does not go with `--grid`")
        for name in ("seeds", "horizon", "limit"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"`{name}` must be >= 1, got {value}")


def _source(spec: TunerSpec) -> tuple[Any, list[str], TunerSpec]:
    """The replay, its provenance lines, and ``spec`` with the route's defaults filled in."""
    from poptune import store
    from poptune.measure.provenance import Provenance
    from poptune.problem.problem import DEFAULT_MAX_DROP
    from poptune.problem.replay import Replay
    from poptune.store.attributes import StoredStudy
    from poptune.tune.efficiency import TUNER_SAMPLERS
    from poptune.tune.gridstudy import replay_grid

    if spec.grid:
        replay = Replay.from_csv(spec.grid)
        defaults: dict[str, Any] = dict(samplers=tuple(TUNER_SAMPLERS), seeds=20, horizon=64,
                        max_drop=replay.max_drop if replay.max_drop is not None else DEFAULT_MAX_DROP)
        first = next(iter(replay.table.values()))
        made = Provenance(hardware=first.hardware, versions=first.versions)  # the grid's, as it records them
        where = [f"grid file: `{spec.grid}` ({len(replay.table)} configurations, measured on "
                 f"{made.hardware_id}; versions {made.versions_text()})"]
    else:
        spec = replace(spec, storage=spec.storage or "sqlite:///studies/grid.db")
        if spec.build:
            spec = replace(spec, max_drop=1.0 if spec.max_drop is None else spec.max_drop)
            replay_grid(spec.storage, model=spec.model, tasks=spec.tasks, limit=spec.limit, lengths=spec.lengths,
                        max_drop=spec.max_drop)
        study = store.load_study(store.open_reader(spec.storage), None)  # the storage, opened once
        replay = Replay.of(study)
        defaults = dict(samplers=("tpe", "nsga2", "random"), seeds=10, horizon=32, max_drop=1.0)
        where = [f"grid study: `{study.study_name}` in {store.public_url(spec.storage)}, measured on "
                 f"{StoredStudy.of(study).hardware_id}"]
    spec = replace(spec, **{k: v for k, v in defaults.items() if getattr(spec, k) is None})
    return replay, where, spec


def _cell(i: Interval) -> str:
    return i.format(".3f")


def _verdicts(rows: list[Any], checkpoints: Sequence[int]) -> list[str]:
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


def _order(replay: Any, spec: TunerSpec) -> list[str]:
    """Where the grid breaks the order, and how many implied verdicts held."""
    from poptune.tune.efficiency import implied_held
    from poptune.tune.structured import order_violations

    assert spec.max_drop is not None and spec.seeds is not None  # filled in by _source

    lines = []
    for what, family_only in (("one family (boundary, offset, K/V source; `skip` ascending)", True),
                              ("the whole order (skipped blocks nested, boundaries nested)", False)):
        v = order_violations(replay.table, replay.num_layers, spec.max_drop, family_only=family_only)
        lines.append(f"- {what}: {v.pairs} ordered pairs; a shallower configuration decided beyond the budget "
                     f"(drop lo > {spec.max_drop:g}) while a deeper one is decided within (drop hi <= "
                     f"{spec.max_drop:g}): **{v.decided}**; drop intervals wholly inverted: **{v.separated}**; by "
                     f"the drop points alone (noise included): {v.point}. The grid decides {v.decided_within} "
                     f"configurations within and {v.decided_beyond} beyond, so the first count can see little.")
    held, implied = implied_held(replay, max_drop=spec.max_drop, trials=16, seeds=spec.seeds, noise=spec.noise)
    lines.append(f"- Verdicts the structure-aware sampler implies after 16 trials (never counted as measured), "
                 f"checked against the recorded figures (candidate or not), over {spec.seeds} seeds: {held} of "
                 f"{implied} held ({held / max(implied, 1):.0%}).")
    return lines


def _markdown(replay: Any, rows: list[Any], spec: TunerSpec, where: list[str], seconds: float, command: str) -> str:
    from poptune.measure.provenance import Provenance, now
    from poptune.tune.efficiency import CHECKPOINTS, HV_SHARE

    assert spec.samplers is not None  # filled in by _source

    feasible = [m for m in replay.table.values() if m.candidate(spec.max_drop)]
    target = max(feasible, key=lambda m: m.speedup, default=None)
    fastest = "no configuration is a candidate" if target is None else (
        f"the fastest candidate is {target.config.title} "
        f"at {target.speedup:.3f}x (drop {target.drop_points:+.2f} [{target.drop_lower:+.2f}, "
        f"{float(target.drop['hi']):+.2f}])")
    ns = " | ".join(f"@{n}" for n in CHECKPOINTS)
    lines = [
        f"# Tuner efficiency on the replay of {replay.study_name}", "",
        f"Grid: {len(replay.table)} measured configurations (the whole search space); budget {spec.max_drop:g} points. "
        "A search can only hand candidates to certification on fresh items (docs/statistics.md): a candidate is "
        "not rejected (the drop's 95% lower end within the budget) and its drop so far is within it; the table "
        f"scores samplers by the candidates they find; {fastest}.",
        "Answers: " + ("drawn from each configuration's recorded 95% intervals (normal, sigma = half-width / 1.96 on "
                       "each side, clipped to the interval; one draw per seed and configuration)." if spec.noise
                       else "the recorded figures (no noise)."),
        f"{spec.seeds} seeds per sampler; every trial counts (a configuration asked twice too); the configurations "
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
    if spec.grid and "structured" in spec.samplers:
        lines += ["", "## The order on this grid", ""] + _order(replay, spec)
    made = Provenance(command=command, date=now())  # no model: no versions of one
    lines += ["", *made.lines(where, date_note=f"; replay wall time {seconds:.0f} s (no model)")]
    return "\n".join(lines)


def summary_line(row: Any) -> str:
    """One sampler's row in one line: best speedup and hits after 16 trials, trials to 95% of the hypervolume."""
    best = _cell(row.best_mean[16]) if 16 in row.best_mean else "-"
    reach = row.to_share if row.to_share is not None else f"> {row.horizon}"
    return f"{row.sampler}: best@16 {best}, hits@16 {row.hits}/{row.seeds}, trials to 95% HV {reach}"


def default_name(replayed: str) -> str:
    """The table's file stem, ``tuner-replay-<model>-<hardware>`` (leaderboards/README.md's scheme).

    ``replayed`` is a grid file's stem (``grid-<model>-<hardware>``) or a stored study's name
    (``<model>@<hardware>``, :func:`poptune.files.result_name`).
    """
    from poptune.files import result_name, safe_name

    if "@" not in replayed and replayed.startswith("grid-"):
        return safe_name(f"tuner-replay-{replayed.removeprefix('grid-')}")
    return result_name("tuner-replay", replayed)


def tuner_table(spec: TunerSpec, command: str) -> tuple[Path, list[Any]]:
    """Replay the grid of ``spec`` for each sampler and seed, and write the tuner table.

    Args:
        spec: What to compare, on which grid.
        command: The command line that made it, for the table's provenance.

    Returns:
        The Markdown file written, and one row per sampler (:func:`poptune.tune.efficiency.tuner_efficiency`).

    Raises:
        InputError: a missing or malformed grid file, or one that does not cover the search space.
        ConfigError: an output that cannot be written, a storage that holds no grid study.
    """
    import optuna

    from poptune.files import check_writable_file, write_text
    from poptune.tune.efficiency import tuner_efficiency

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    if spec.out:
        check_writable_file(spec.out)
    replay, where, spec = _source(spec)
    assert spec.max_drop is not None and spec.samplers is not None and spec.seeds is not None  # filled in
    out = Path(spec.out) if spec.out else Path("leaderboards") / f"{default_name(replay.study_name)}.md"
    started = time.monotonic()
    rows = tuner_efficiency(replay, max_drop=spec.max_drop, samplers=spec.samplers, seeds=spec.seeds,
                            noise=spec.noise, horizon=spec.horizon)
    write_text(out, _markdown(replay, rows, spec, where, time.monotonic() - started, command))
    return out, rows
