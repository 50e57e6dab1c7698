"""A measured grid as a small CSV table: every configuration of a study, one row each, readable without Optuna.

:func:`write_grid` writes what a stored (grid) study measured, :func:`read_grid` reads it back as
:class:`~poptune.store.measurement.Measurement` records, so that the replay (:mod:`poptune.problem.replay`) and its
Gymnasium environment answer configurations from the file alone. Columns (:data:`COLUMNS`), one row per
configuration in the order of :func:`~poptune.problem.space.all_configs` (``skip`` 0 is the full model; its
``boundary`` and ``offset`` mean nothing):

- ``skip``, ``boundary``, ``offset``, ``kv``: the configuration (``kv``: the skipped block's K/V source,
  :data:`poptune.kv.registry.NAMES`).
- ``speedup``, ``speedup_lo``, ``speedup_hi``: the paired expected time-to-first-token speedup over the workload
  and its 95% interval; ``ideal``: the speedup of the skipped FLOPs alone; ``pairs``: timing pairs (fewest over
  the timed prompt lengths).
- ``drop``, ``drop_lo``, ``drop_hi``: the paired accuracy drop against the full model in points and its 95%
  interval, recomputed from the stored per-item outcomes by the current interval (the score test of
  :mod:`poptune.evaluate.paired` over the trial's stored race design; :mod:`poptune.store.redecide`): a budget is met
  when ``drop_hi``
  is within it, exceeded when ``drop_lo`` is beyond it; ``items``: items scored (racing: over all tasks).
- ``accuracy``: the study's accuracy objective (the reference accuracy minus the drop).
- ``ttft_ms``, ``full_ttft_ms``: POP's and the paired full model's expected p50 TTFT when it was timed;
  ``reference_ms``: the study's reference full-model TTFT (its latency objective is ``reference_ms / speedup``);
  ``target_length``: the objective's prompt length (the longest timed).
- ``noisy``: 1 where a null check failed and no trusted measurement replaced it.
- ``model``, ``num_layers``, ``max_drop`` (empty: no budget), ``hardware`` (id), ``versions``: the study's.

Empty interval cells mean none was measured (then the value has no noise to draw, see :func:`draw`).
"""

from __future__ import annotations

import csv
import math
import zlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

from poptune.engine import PopConfig
from poptune.errors import ConfigError, InputError
from poptune.interval import Interval
from poptune.kv import registry as kv_registry
from poptune.problem.problem import TuningProblem
from poptune.problem.space import all_configs
from poptune.store.attributes import StoredStudy
from poptune.store.measurement import Measurement
from poptune.store.redecide import redecide
from poptune.store.trials import measured_table, reference_ms

if TYPE_CHECKING:
    import numpy as np
    import optuna

__all__ = ["COLUMNS", "GridTable", "Z95", "draw", "grid_rows", "noise_rng", "read_grid", "write_grid"]

COLUMNS = (
    "skip", "boundary", "offset", "kv", "speedup", "speedup_lo", "speedup_hi", "ideal", "drop", "drop_lo", "drop_hi",
    "accuracy", "items", "pairs", "ttft_ms", "full_ttft_ms", "reference_ms", "target_length", "noisy", "model",
    "num_layers", "max_drop", "hardware", "versions",
)

#: The normal quantile of a two-sided 95% interval: a recorded half-width is 1.96 sigma.
Z95 = 1.959964

#: The one task name of a measurement read from a grid file (its accuracy is the workload's objective).
WORKLOAD = "workload"


@dataclass(frozen=True)
class GridTable:
    """A grid file read back.

    Attributes:
        name: The file's stem (``grid-<model>-<hardware>``).
        model, num_layers, max_drop, reference_ms: The study's, as recorded in every row.
        measurements: Per configuration, its recorded measurement.
    """

    name: str
    model: str
    num_layers: int
    max_drop: float | None
    reference_ms: float
    measurements: dict[PopConfig, Measurement]


def _number(value: float | None, digits: int = 6) -> str:
    return "" if value is None else f"{value:.{digits}g}"


def _row(m: Measurement, study: dict[str, Any]) -> dict[str, str]:
    info = m.info()
    interval, drop = m.speedup_interval, m.drop or {}
    c = m.config
    return {
        "skip": str(c.skip), "boundary": c.boundary, "offset": str(c.offset), "kv": c.kv,
        "speedup": _number(m.speedup), "speedup_lo": _number(interval.lo if interval else None),
        "speedup_hi": _number(interval.hi if interval else None), "ideal": _number(info["ideal"]),
        "drop": _number(m.drop_points), "drop_lo": _number(drop.get("lo")), "drop_hi": _number(drop.get("hi")),
        "accuracy": _number(m.objective_accuracy), "items": str(sum(m.items.values())) if m.items else "",
        "pairs": str(info["pairs"] or ""), "ttft_ms": _number(m.prefill_ms), "full_ttft_ms": _number(m.full_ms),
        "target_length": str(m.target_length), "noisy": str(int(m.noisy)),
        "hardware": str(m.hardware.get("hardware_id") or study["hardware"]),
        "versions": "; ".join(f"{k} {v}" for k, v in sorted((m.versions or study["versions"]).items())),
        **{k: study[k] for k in ("model", "num_layers", "max_drop", "reference_ms")},
    }


def grid_rows(study: "optuna.Study") -> list[dict[str, str]]:
    """The rows of ``study``'s measured POP configurations (a trusted measurement of each first), in
    :func:`all_configs` order; a study without any measurement gives none."""
    stored = StoredStudy.of(study)
    if not stored.recorded:
        raise ConfigError(f"study {study.study_name!r} is not a POP study (no problem recorded)")
    problem = TuningProblem.from_dict(stored.problem)
    shared = {"model": str(stored.model or ""), "num_layers": str(stored.num_layers),
              "max_drop": _number(problem.max_drop), "reference_ms": _number(reference_ms(study)),
              "hardware": str(stored.hardware_id or ""), "versions": stored.versions}
    full_run = stored.full_run
    table = {c: redecide(m, full_run) for c, m in measured_table(study).items()}  # the current interval
    order = {c: i for i, c in enumerate(all_configs(stored.num_layers, problem.kv))}
    configs = sorted(table, key=lambda c: (order.get(c, len(order)), c.skip, c.offset, c.boundary, c.kv))
    return [_row(table[c], shared) for c in configs]


def write_grid(study: "optuna.Study", path: str | Path) -> int:
    """Write ``study``'s rows to the CSV file ``path`` (atomically); returns how many."""
    import io

    from poptune.files import write_text

    rows = grid_rows(study)
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_text(path, text.getvalue().rstrip("\n"))  # write_text ends the file with one newline
    return len(rows)


@overload
def _float(row: dict[str, str], key: str, where: str, *, optional: Literal[False] = False) -> float: ...
@overload
def _float(row: dict[str, str], key: str, where: str, *, optional: bool) -> float | None: ...


def _float(row: dict[str, str], key: str, where: str, *, optional: bool = False) -> float | None:
    text = (row.get(key) or "").strip()
    if not text and optional:
        return None
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"{where}: `{key}` must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise InputError(f"{where}: `{key}` must be finite, got {text!r}")
    return value


def _interval(row: dict[str, str], key: str, point: float, where: str) -> Interval | None:
    lo, hi = _float(row, f"{key}_lo", where, optional=True), _float(row, f"{key}_hi", where, optional=True)
    if (lo is None) != (hi is None):
        raise InputError(f"{where}: `{key}_lo` and `{key}_hi` must be given together")
    if lo is not None and hi is not None and lo > hi:
        raise InputError(f"{where}: `{key}_lo` {lo} is above `{key}_hi` {hi}")
    return None if lo is None or hi is None else Interval(point, lo, hi)


def _measurement(row: dict[str, str], where: str) -> Measurement:
    """A row as a :class:`Measurement` of one timed length and one task (``workload``)."""
    try:
        config = PopConfig.from_fields(row["skip"], row["boundary"], row["offset"], kv=row.get("kv"), who="its fields")
    except ConfigError as e:
        raise InputError(f"{where}: not a configuration ({e})") from None
    speedup = _float(row, "speedup", where)
    if speedup is None or speedup <= 0:
        raise InputError(f"{where}: `speedup` must be > 0, got {row['speedup']!r}")
    ci = _interval(row, "speedup", speedup, where)
    drop = _float(row, "drop", where)
    drop_ci = _interval(row, "drop", drop, where)
    accuracy = _float(row, "accuracy", where)
    full_ms = _float(row, "full_ttft_ms", where, optional=True) or 1.0
    items = int(_float(row, "items", where, optional=True) or 0)
    latency = {"pop_ms": full_ms / speedup, "full_ms": full_ms, "speedup": speedup,
               "ideal": _float(row, "ideal", where, optional=True) or speedup,
               "pairs": _float(row, "pairs", where, optional=True)}
    if ci is not None:
        latency.update(speedup_lo=ci.lo, speedup_hi=ci.hi)
    target = int(_float(row, "target_length", where, optional=True) or 0)
    reference = accuracy + drop / 100
    return Measurement(
        config=config, latency={target: latency}, target_length=target, accuracy={WORKLOAD: accuracy},
        full_accuracy={WORKLOAD: reference}, items={WORKLOAD: items} if items else {},
        drop=None if drop_ci is None else {"mean": drop, "lo": drop_ci.lo, "hi": drop_ci.hi, "items": items},
        reference_accuracy=None if drop_ci is None else reference,
        hardware={"hardware_id": row.get("hardware", "")},
        versions=dict(part.strip().split(" ", 1) for part in row.get("versions", "").split(";") if " " in part.strip()),
        null_check={"noisy": (row.get("noisy") or "0").strip() == "1"},
    )


def _open_rows(path: Path) -> list[dict[str, str]]:
    if path.is_dir():  # issue 87: `grid="."` said it did not exist
        raise InputError(f"grid file {path} is a folder, not a grid file: name the .csv file `poptune grid` wrote "
                         "(grid-<model>-<hardware>.csv)")
    if path.exists() and not path.is_file():
        raise InputError(f"grid file {path} is not a regular file")
    if not path.is_file():
        raise InputError(f"grid file {path} does not exist (build it with `poptune grid`)")
    try:  # utf-8-sig: a table saved by a spreadsheet begins with a byte-order mark (issue 87: "missing skip")
        with path.open(newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            missing = [c for c in COLUMNS if c not in (reader.fieldnames or []) and c != "kv"]  # kv: own if absent
            if missing:
                raise InputError(f"grid file {path} is not a grid table: missing column(s) {', '.join(missing)}")
            rows = list(reader)
    except (UnicodeDecodeError, csv.Error) as e:
        raise InputError(f"grid file {path} is not a readable CSV file: {e}") from None
    if not rows:
        raise InputError(f"grid file {path} holds no configuration")
    return rows


def read_grid(path: str | Path) -> GridTable:
    """The grid file ``path`` read back.

    Raises:
        InputError: the file is missing, is not a CSV table with :data:`COLUMNS`, holds no row, or a row is
            malformed (a number that is not one, an unknown boundary, a configuration twice or outside the
            space of its ``num_layers``, a study field that differs between rows); the message names the row.
    """
    path = Path(path)
    rows = _open_rows(path)
    first = f"{path}, row 2"
    num_layers = int(_float(rows[0], "num_layers", first) or 0)
    space = set(all_configs(num_layers, kv_registry.NAMES)) if num_layers >= 1 else set()
    measurements: dict[PopConfig, Measurement] = {}
    for number, row in enumerate(rows, start=2):  # row 1 is the header
        where = f"{path}, row {number}"
        if None in row or any(v is None for v in row.values()):
            raise InputError(f"{where}: {len(row)} cells where the header has {len(COLUMNS)}")
        for key in ("model", "num_layers", "max_drop", "reference_ms"):
            if row[key] != rows[0][key]:
                raise InputError(f"{where}: `{key}` {row[key]!r} differs from the first row's {rows[0][key]!r}")
        m = _measurement(row, where)
        if m.config not in space:
            raise InputError(f"{where}: {m.config} is outside the search space of {num_layers} layers")
        if m.config in measurements:
            raise InputError(f"{where}: {m.config} appears twice")
        measurements[m.config] = m
    return GridTable(name=path.stem, model=rows[0]["model"], num_layers=num_layers,
                     max_drop=_float(rows[0], "max_drop", first, optional=True),
                     reference_ms=_float(rows[0], "reference_ms", first) or 1.0, measurements=measurements)


def noise_rng(seed: int, config: PopConfig) -> "np.random.Generator":
    """The generator of ``config``'s noisy answer under ``seed``: one draw per (seed, configuration), whatever
    the order in which configurations are asked."""
    import numpy as np

    return np.random.default_rng([seed, zlib.crc32(repr(config).encode())])


def _drawn(value: float, interval: Interval | None, z: float) -> float:
    """``value`` moved by ``z`` sigmas: sigma is the half-width on that side over 1.96, clipped to the interval."""
    if interval is None:
        return value
    lo, hi = min(interval.lo, value), max(interval.hi, value)
    z = max(-Z95, min(Z95, z))
    return value + z * ((hi - value) if z >= 0 else (value - lo)) / Z95


def draw(m: Measurement, rng: "np.random.Generator") -> Measurement:
    """A measurement drawn from ``m``'s recorded intervals: what measuring it again might have given.

    Speedup and drop are drawn independently, each normal around its recorded value with sigma = the
    interval's half-width / 1.96 (the upper half-width above the value, the lower below; for a symmetric
    interval a plain normal), clipped to the recorded 95% interval. A figure without an interval keeps its
    value. Every timed length's speedup (and its interval) is scaled alike; the accuracy and the drop's interval
    move with the drop, so a budget judged on the drop's upper bound sees the noise too.
    """
    speedup, drop = m.speedup, m.drop_points
    drop_ci = Interval(drop, float(m.drop["lo"]), float(m.drop["hi"])) if m.drop is not None else None
    z_speed, z_drop = rng.standard_normal(2)
    factor = _drawn(speedup, m.speedup_interval, float(z_speed)) / speedup
    new_drop = _drawn(drop, drop_ci, float(z_drop))
    scaled = ("speedup", "speedup_lo", "speedup_hi")
    latency = {n: {k: (v * factor if k in scaled and v is not None else v) for k, v in row.items()}
               for n, row in m.latency.items()}
    for row in latency.values():
        pop_ms = row["pop_ms"]
        assert pop_ms is not None  # every replayed row was timed
        row["pop_ms"] = float(pop_ms) / factor
    moved = new_drop - drop
    shifted = None
    if m.drop is not None and drop_ci is not None:  # both or neither
        shifted = dict(m.drop, mean=new_drop, lo=drop_ci.lo + moved, hi=drop_ci.hi + moved)
    return replace(m, latency=latency, accuracy={t: a - moved / 100 for t, a in m.accuracy.items()}, drop=shifted)
