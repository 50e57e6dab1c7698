"""The methods leaderboard, rebuilt from raw comparison records alone (``poptune leaderboard --records DIR``).

For each (model, hardware) of the records in a folder, :func:`write_methods_board` writes
``methods-<model>-<hardware>.md``, ``.csv`` and ``.png``: one section per workload, every method's accuracy
(paired drop against the full model, 95% score interval), its time-to-first-token, time-per-output-token and
end-to-end ratios per request profile (medians of interleaved pairs with order-statistic 95% intervals), and
for each baseline the paired comparison with POP:

- **the POP row it meets**: the slowest POP configuration at least as fast in prefill (TTFT at the longest
  profile), chosen by speed alone, never by accuracy (choosing the most accurate would be a selection on the
  data being tested); when no POP row is that fast, the fastest, marked. "At least as fast" compares the
  **point medians** of the TTFT ratios, not their intervals: the pairing is a rule, not a claim that POP's row
  is faster;
- **POP - baseline** in points over the same items with the score test's interval
  (:func:`poptune.evaluate.paired.paired_drop`, the primary metric's direction passed: a bits-per-byte task's
  lead is ``baseline - POP``) at confidence ``1 - 0.05 / R`` for the table's R baseline rows (Bonferroni), so
  every verdict **of one table** holds together at 5%; the tables of a board (one per workload) are not
  corrected together: a board of k tables holds together at up to k x 5% (two tables: about 10%);
- **the verdict**: ``POP more accurate`` (lower end above 0), ``baseline more accurate`` (upper end below 0),
  else ``undecided at N items``.

Everything is read from the records and ordered as they are, so the same records give byte-identical files.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from poptune.errors import ConfigError
from poptune.interval import Interval
from poptune.jsonfile import loads

__all__ = ["Row", "lead_of", "read_records", "row_confidence", "rows_of", "verdict_of", "write_methods_board"]

_KIND, _VERSION = "poptune-methods", 1


@dataclass(frozen=True)
class Row:
    """One method of one workload, with its paired figures."""

    name: str
    method: str
    label: str
    accuracy: float
    drop: Any  # PairedDrop against the full model
    speed: dict[str, dict[str, Interval]]  # profile -> ttft / tpot / e2e: median ratio full / method, 95% interval
    against: str | None = None  # the POP row it is paired with (baselines)
    slower: bool = False  # no POP row was as fast
    lead: Any = None  # PairedDrop: POP - baseline
    verdict: str = ""


def _ratio(values: Sequence[float]) -> Interval:
    """The median of per-pair ratios (full / method: above 1 the method is faster) with its order-statistic 95%
    interval, as a timed pair reports its speedup (:attr:`poptune.measure.records.PairRecord.speedup_ci`)."""
    from poptune.measure.stats import median_ci

    return median_ci(list(values))


def _times(ratio: Interval) -> str:
    """``1.42x [1.38, 1.47]``: a ratio as the board prints it."""
    return ratio.format(".2f", "x")


def _speed(entry: Mapping[str, Any], profiles: Sequence[Sequence[int]]) -> dict[str, dict[str, Interval]]:
    out = {}
    for prompt, output in profiles:
        timing = entry.get("timing", {}).get(f"{prompt}+{output}")
        if not timing:
            continue
        ta, tb = timing["ttft_ms"]["a"], timing["ttft_ms"]["b"]
        da, db = timing["tpot_ms"]["a"], timing["tpot_ms"]["b"]
        e2e = [(tb[i] + output * db[i]) / (ta[i] + output * da[i]) for i in range(min(len(ta), len(da)))]
        out[f"{prompt}+{output}"] = {"ttft": _ratio([b / a for a, b in zip(ta, tb)]),
                                     "tpot": _ratio([b / a for a, b in zip(da, db)]), "e2e": _ratio(e2e)}
    return out


def row_confidence(rows: int) -> float:
    """Each row's two-sided confidence in a table of ``rows`` baseline rows: ``1 - 0.05 / rows`` (Bonferroni),
    so all the table's verdicts hold together at 95%."""
    return 1 - 0.05 / max(rows, 1)


def lead_of(pop: Mapping[str, Sequence[float]], baseline: Mapping[str, Sequence[float]], rows: int,
            lower_is_better: Sequence[str] = ()) -> Any:
    """POP - baseline in points over the same items, the score test's interval at :func:`row_confidence`;
    ``lower_is_better``: tasks whose metric is better lower (bits per byte), whose lead is then baseline - POP,
    so a positive lead is POP better on every task."""
    from poptune.evaluate.paired import paired_drop

    return paired_drop(pop, baseline, confidence=row_confidence(rows), lower_is_better=lower_is_better)


def lower_tasks(tasks: Sequence[str]) -> list[str]:
    """The tasks of ``tasks`` whose primary metric is better when lower (bits per byte)."""
    from poptune.evaluate.suite import LOWER_IS_BETTER, PRIMARY_METRIC

    return [t for t in tasks if PRIMARY_METRIC.get(t) in LOWER_IS_BETTER]


def verdict_of(lead: Any) -> str:
    """``POP more accurate`` (the interval above 0), ``baseline more accurate`` (below) or ``undecided``."""
    return ("POP more accurate" if lead.lo > 0 else "baseline more accurate" if lead.hi < 0
            else f"undecided at {lead.total} items")


def _mean(outcomes: Mapping[str, Sequence[float]]) -> float:
    return 100 * sum(sum(v) / len(v) for v in outcomes.values()) / len(outcomes)


def _partner(row: Row, pops: Sequence[Row], profile: str) -> tuple[Row, bool]:
    """The slowest POP row at least as fast in prefill as ``row`` (else the fastest, ``True``: slower)."""
    speed = row.speed[profile]["ttft"].point
    fast = [p for p in pops if p.speed[profile]["ttft"].point >= speed]
    if fast:
        return min(fast, key=lambda p: p.speed[profile]["ttft"].point), False
    return max(pops, key=lambda p: p.speed[profile]["ttft"].point), True


def _timed(record: Mapping[str, Any], timings: Mapping[str, Mapping[str, Any]] | None) -> Mapping[str, Any]:
    """``record`` with each untimed method's timing taken from ``timings`` (another record of the same model and
    machine, by method name and label: the methods are built the same way), and that record's profiles."""
    if not timings or any(e.get("timing") for e in record["methods"]):
        return record
    methods = []
    for e in record["methods"]:
        other = timings["methods"].get(e["name"])
        borrowed = other.get("timing") if other and other["label"] == e["label"] else None
        methods.append({**e, "timing": borrowed} if borrowed else e)
    return {**record, "methods": methods, "profiles": timings["profiles"], "pairs": timings["pairs"],
            "decode_steps": timings["decode_steps"], "timed_in": timings["file"]}


def rows_of(record: Mapping[str, Any], timings: Mapping[str, Any] | None = None) -> list[Row]:
    """The rows of one workload's record, baselines paired with POP (module docstring); ``timings``: where a
    record was scored without timing, the timing of another record of the same machine (:func:`_timed`)."""
    from poptune.evaluate.paired import paired_drop

    if record.get("record") != _KIND or record.get("version") != _VERSION:
        raise ConfigError(f"not a methods comparison record of version {_VERSION}: {record.get('record')!r} "
                          f"{record.get('version')!r}")
    record = _timed(record, timings)
    entries = record["methods"]
    full = next((e for e in entries if e["method"] == "full"), None)
    if full is None:
        raise ConfigError("a methods comparison record needs the full model's outcomes")
    profiles = record["profiles"]
    longest = max(profiles, key=lambda p: p[0]) if profiles else None  # none: scored only, nothing to pair by
    profile = f"{longest[0]}+{longest[1]}" if longest else None
    lower = lower_tasks(record.get("tasks") or sorted(full["outcomes"]))  # the metric's direction, per task
    rows = [Row(e["name"], e["method"], e["label"], _mean(e["outcomes"]),
                paired_drop(full["outcomes"], e["outcomes"], lower_is_better=lower), _speed(e, profiles))
            for e in entries]
    outcomes = {e["name"]: e["outcomes"] for e in entries}
    pops = [r for r in rows if r.method == "pop" and profile in r.speed]
    baselines = [r for r in rows if r.method not in ("full", "pop") and profile in r.speed]
    paired = {}
    for row in baselines if pops else []:
        assert profile is not None  # pops: rows timed under the profile
        partner, slower = _partner(row, pops, profile)
        lead = lead_of(outcomes[partner.name], outcomes[row.name], len(baselines), lower)
        paired[row.name] = Row(**{**row.__dict__, "against": partner.label, "slower": slower, "lead": lead,
                                  "verdict": verdict_of(lead)})
    return [paired.get(r.name, r) for r in rows]


def read_records(folder: str | Path) -> list[dict[str, Any]]:
    """Every methods comparison record (``methods-*.json``) in ``folder``, sorted by file name."""
    from poptune.comparison.schema import check_record

    paths = sorted(Path(folder).glob("methods-*.json"))
    records = []
    for path in paths:
        try:
            text = path.read_text()
        except (OSError, ValueError) as e:
            raise ConfigError(f"cannot read the comparison record {path}: {e}") from e
        data = loads(text, f"comparison record {path}")
        if not isinstance(data, dict) or data.get("record") != _KIND or data.get("version") != _VERSION:
            shown = (data.get("record"), data.get("version")) if isinstance(data, dict) else type(data).__name__
            raise ConfigError(f"{path} is named as a methods comparison record but is not one of version {_VERSION} "
                              f"(found {shown!r}): move it out of the folder")
        check_record(data, path)
        records.append({**data, "_file": path.name})
    return records


def table_cell(text: str) -> str:
    """``text`` as one Markdown table cell: a line break or ``|`` of a record's label (``"x\\n| fake | row |"``)
    would otherwise end the row or add cells and rows to the table."""
    return " ".join(str(text).split()).replace("\\", "\\\\").replace("|", "\\|")


def _cells(row: Row, profiles: Sequence[str]) -> list[str]:
    speed = [_times(row.speed[p][k]) if p in row.speed else "1.00x (itself)" if row.method == "full" else ""
             for p in profiles for k in ("ttft", "tpot", "e2e")]
    lead = row.lead.interval.format("+.2f") if row.lead is not None else ""
    against = f"{row.against}{' (slower: no POP row as fast)' if row.slower else ''}" if row.against else ""
    drop = row.drop.interval.format("+.2f") if row.method != "full" else ""
    return [row.method, row.label, f"{row.accuracy:.2f}", drop, *speed, against, lead, row.verdict]


def _wins(rows: Sequence[Row], profiles: Sequence[str]) -> list[str]:
    """Where a baseline is faster end to end than the POP row it is paired with (intervals apart): static
    pruning also shortens every decode step, so a long answer can outweigh POP's faster prefill."""
    pops = {r.label: r for r in rows if r.method == "pop"}
    lines = []
    for p in profiles:
        faster = []
        for r in rows:
            partner = pops.get(r.against or "")
            if partner is None or p not in r.speed or p not in partner.speed:
                continue
            if r.speed[p]["e2e"].above(partner.speed[p]["e2e"]):
                faster.append(f"{r.label} ({_times(r.speed[p]['e2e'])}, against {partner.label}'s "
                              f"{_times(partner.speed[p]['e2e'])}; "
                              f"POP - baseline {r.lead.mean:+.2f} points)")
        lines.append(f"- {p}: " + ("; ".join(faster) if faster else "no baseline is faster end to end than the POP "
                                   "row it is paired with, beyond both intervals"))
    return lines


def _section(record: Mapping[str, Any], rows: Sequence[Row]) -> list[str]:
    profiles = [f"{a}+{b}" for a, b in record["profiles"]]
    baselines = [r for r in rows if r.lead is not None]
    decided = sum(not r.verdict.startswith("undecided") for r in baselines)
    head = ["method", "configuration", "accuracy %", "drop vs full [95%]",
            *[f"{k} {p}" for p in profiles for k in ("TTFT", "TPOT", "end-to-end")],
            "paired POP row", "POP - baseline", "verdict"]
    items = sum(len(v) for v in record["methods"][0]["outcomes"].values())
    held_out = f" after the first {record['skip']} of each task's order" if record.get("skip") else ""
    lines = [f"## {record['workload']}: {', '.join(record['tasks'])} ({record['per_task']} items per task at most"
             f"{held_out}, {items} in all)", "",
             f"{decided} of {len(baselines)} baseline verdicts decided; POP - baseline intervals at "
             f"{100 * row_confidence(len(baselines)):.2f}% each, so this table's verdicts hold together at 95% (per "
             "table: the board's tables are not corrected together). Each baseline meets the slowest POP row whose "
             "median TTFT ratio is at least its own (point medians, not intervals).",
             "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(map(table_cell, _cells(r, profiles))) + " |" for r in rows]
    lines += ["", "Where a baseline is faster end to end than its paired POP row (static pruning shortens every decode "
              "step too):", "", *_wins(rows, profiles), ""]
    return lines + _costs(record, rows, row_confidence(len(baselines)))


def _costs(record: Mapping[str, Any], rows: Sequence[Row], confidence: float) -> list[str]:
    """What each undecided verdict would cost (:mod:`poptune.comparison.cost`): a plan, not a claim."""
    from poptune.comparison.cost import MAX_ITEMS, decision_cost

    pops = {r.label: r.name for r in rows if r.method == "pop"}
    lines = []
    for r in rows:
        cost = decision_cost(record, pops[r.against], r.name, r.lead.mean, confidence) \
            if r.verdict.startswith("undecided") and r.against is not None else None  # undecided: paired
        if cost is not None and cost.per_task > MAX_ITEMS:
            lines.append(f"- {r.label} against {r.against} ({r.lead.mean:+.2f} points): a lead this small is not "
                         f"decided at any size worth scoring (over {MAX_ITEMS:,} items per task)")
        elif cost is not None:
            lines.append(f"- {r.label} against {r.against} ({r.lead.mean:+.2f} points): about {cost.per_task:,} items "
                         f"per task; the whole table at that size ~{cost.minutes:,.0f} min here: `{cost.command}`")
    if not lines:
        return []
    return ["What the undecided verdicts would cost, if the true lead were the one observed (80% power at this "
            "table's per-row confidence; minutes from this record's scoring times, every method):", "", *lines, ""]


def _provenance(record: Mapping[str, Any]) -> list[str]:
    """A record's line of the ``## Provenance`` section: its file, workload and timings, and its
    :class:`~poptune.measure.provenance.Provenance` (command, date, hardware, versions)."""
    from poptune.measure.provenance import Provenance

    made = Provenance.from_dict(record)
    timed = f"timings from `{record['timed_in']}`" if record.get("timed_in") else \
        f"{record['pairs']} timing pairs per profile, {record['decode_steps']} decode steps timed per pair" + \
        ("" if record["tasks"] else " (timings only)")
    return [f"- `{record['_file']}`: {record['workload']}, command `{made.command or 'not recorded'}`, "
            f"{made.date or ''}, {timed}; {made.sentence()}"]


def _csv(groups: Sequence[tuple[Mapping[str, Any], Sequence[Row]]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["workload", "method", "configuration", "ratio", "accuracy", "drop", "drop_lo", "drop_hi",
                     "profile", "ttft", "ttft_lo", "ttft_hi", "tpot", "tpot_lo", "tpot_hi", "e2e", "e2e_lo", "e2e_hi",
                     "paired_pop", "pop_minus_baseline", "lead_lo", "lead_hi", "verdict"])
    for record, rows in groups:
        ratios = {e["name"]: e["ratio"] for e in record["methods"]}
        for r in rows:
            for p, s in (r.speed or {"": {}}).items():
                speed = [f"{getattr(s[k], a):.4f}" if k in s else "" for k in ("ttft", "tpot", "e2e")
                         for a in ("point", "lo", "hi")]
                lead = [f"{getattr(r.lead, a):.4f}" for a in ("mean", "lo", "hi")] if r.lead else ["", "", ""]
                writer.writerow([record["workload"], r.method, r.label, f"{ratios[r.name]:.4f}", f"{r.accuracy:.4f}",
                                 f"{r.drop.mean:.4f}", f"{r.drop.lo:.4f}", f"{r.drop.hi:.4f}", p, *speed,
                                 r.against or "", *lead, r.verdict])
    return out.getvalue().rstrip("\n")


def _plot(groups: Sequence[tuple[Mapping[str, Any], Sequence[Row]]], path: Path, title: str) -> Path:
    from poptune.plots import pyplot, save_figure

    plt = pyplot()
    profiles = [f"{a}+{b}" for a, b in groups[0][0]["profiles"]] or [""]  # none: accuracy alone, at speed 1
    fig, axes = plt.subplots(len(groups), len(profiles), figsize=(6 * len(profiles), 4.5 * len(groups)),
                             squeeze=False)
    colors = {"full": "black", "pop": "tab:blue"}
    for i, (record, rows) in enumerate(groups):
        for j, p in enumerate(profiles):
            ax = axes[i][j]
            for r in rows:
                s = r.speed.get(p, {}).get("e2e")
                x, xerr = (s.point, [[s.point - s.lo], [s.hi - s.point]]) if s else (1.0, None)
                y, yerr = r.accuracy, [[r.drop.hi - r.drop.mean], [r.drop.mean - r.drop.lo]]
                ax.errorbar([x], [y], xerr=xerr, yerr=yerr if r.method != "full" else None, fmt="o", ms=4,
                            capsize=2, lw=0.7, color=colors.get(r.method, "tab:red"))
                ax.annotate(f"{r.method} {r.label}", (x, y), fontsize=5, xytext=(3, 2), textcoords="offset points")
            ax.set_title(f"{record['workload']}, request {p}" if p else f"{record['workload']} (not timed)",
                         fontsize=9)
            ax.set_xlabel("end-to-end speedup vs full model (x)")
            ax.set_ylabel("accuracy (%)")
            ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return save_figure(fig, path)


def write_methods_board(folder: str | Path, out: str | Path, *, command: str) -> list[Path]:
    """Write the methods leaderboard of every (model, hardware) in the records of ``folder`` into ``out``."""
    from poptune.files import safe_name, write_text

    records = read_records(folder)
    by_machine: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for record in records:
        by_machine.setdefault((record["model"], record["hardware"]["hardware_id"]), []).append(record)
    written: list[Path] = []
    if by_machine:
        Path(out).mkdir(parents=True, exist_ok=True)
    for (model, hardware), group in sorted(by_machine.items()):
        timed = next((r for r in sorted(group, key=lambda r: bool(r["tasks"]))  # a timings-only record first
                      if any(e.get("timing") for e in r["methods"])), None)
        timings = {"methods": {e["name"]: e for e in timed["methods"]}, "profiles": timed["profiles"],
                   "pairs": timed["pairs"], "decode_steps": timed["decode_steps"], "file": timed["_file"]} \
            if timed else None
        groups = [(_timed(r, timings), rows_of(r, timings)) for r in group if r["tasks"]]
        if not groups:  # timings alone make no table
            continue
        stem = safe_name(f"methods-{model}-{hardware}")
        target = Path(out)
        title = f"Methods on {model}@{hardware}: POP against structured pruning"
        lines = [f"# {title}", "", (f"Rebuilt by `{command}` from the raw records under `{folder}`. Every method "
                 "is scored on the same items; accuracy in %, drops and leads in points. Speed ratios are full "
                 "model / method (above 1: faster), medians of interleaved pairs with their 95% order-statistic "
                 "intervals; end-to-end = TTFT + output tokens x TPOT per pair. See poptune/comparison/board.py "
                 "for the pairing rule and the verdicts."), "", f"![accuracy vs end-to-end speedup]({stem}.png)", ""]
        for timed_record, rows in groups:
            lines += _section(timed_record, rows)
        lines += ["## Provenance", "", *[line for r in group for line in _provenance(_timed(r, timings) if r["tasks"]
                                                                                else r)]]
        write_text(target / f"{stem}.md", "\n".join(lines))
        write_text(target / f"{stem}.csv", _csv(groups))
        written += [target / f"{stem}.md", target / f"{stem}.csv", _plot(groups, target / f"{stem}.png", title)]
    return written
