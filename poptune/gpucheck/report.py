"""The check's records: every result as JSON, the summary as Markdown, and the loud FAIL lines.

Written after every row and every stage, so a check stopped by its time limit still leaves what it measured;
and read back by the same command on the same folder (:meth:`Report.resume`), which keeps the stages a
previous run finished and runs the rest.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from poptune.gpucheck.plan import AA_TOLERANCE, DECODE_TOLERANCE, IDEAL_SLACK, TARGET, Plan, wide
from poptune.gpucheck.preflight import Check
from poptune.measure.nullcheck import noisy_reasons

__all__ = ["Report", "failures"]


def _same_commit(old: str | None, new: str | None) -> bool:
    """Whether two runs' commits are one known, clean commit."""
    return bool(old) and old == new and not str(new).endswith("+dirty")


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    return row["batch"], None if row["image"] else row["length"], bool(row.get("graphs"))


def _fmt(value: Any, spec: str, unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


def _row_failures(row: dict[str, Any]) -> list[str]:
    where = f"{row['model']} {row['image'] or row['length']} b{row['batch']}"
    lines = []
    if row["speedup"] > row["ideal"] * IDEAL_SLACK:
        lines.append(f"FAIL ideal: {where} measured {row['speedup']:.3f}x > ideal {row['ideal']:.3f}x x {IDEAL_SLACK}")
    if row.get("throttled"):
        failing = row.get("throttle_reasons") or row["clock_reasons"]
        lines.append(f"FAIL throttle: {where} {', '.join(failing)} during the timed pairs "
                     f"(reasons seen: {', '.join(row['clock_reasons'] or []) or '-'})")
    return lines


def _null_lines(null: dict[str, Any]) -> list[str]:
    """The null checks judged by their intervals, as the library judges a run's (:class:`~poptune.measure.NullCheck`):
    FAIL where the interval lies outside ``1 +- tolerance`` (identical work measured different), NOTE where it
    straddles a bound (its pairs cannot show it within), nothing where it lies inside. A point estimate off by more
    than the tolerance with an interval holding 1 is noise, not a failure."""
    lines = []
    for key, tolerance, label in (("aa", AA_TOLERANCE, "A/A"), ("decode", DECODE_TOLERANCE, "decode")):
        fig = null[key]
        where = (f"{fig['speedup']:.4f} [{fig['lo']:.4f}, {fig['hi']:.4f}] at {null['length']} tokens, "
                 f"{fig['pairs']} pairs")
        if noisy_reasons(label, fig["lo"], fig["hi"], tolerance):
            lines.append(f"FAIL {label}: {where}: the interval lies outside 1 +- {tolerance:.0%}")
        elif not 1 - tolerance <= fig["lo"] <= fig["hi"] <= 1 + tolerance:
            lines.append(f"NOTE {label}: {where}: not shown within 1 +- {tolerance:.0%} (too few pairs to tell)")
    return lines


def _aa_more_lines(data: dict[str, Any]) -> list[str]:
    """The further A/A checks (issue 89: 512 tokens as well as 2,048) judged as the first one."""
    lines = []
    for extra in data.get("aa_more") or []:
        fig = extra["aa"]
        where = (f"{fig['speedup']:.4f} [{fig['lo']:.4f}, {fig['hi']:.4f}] at {extra['length']} tokens, "
                 f"{fig['pairs']} pairs")
        if noisy_reasons("A/A", fig["lo"], fig["hi"], AA_TOLERANCE):
            lines.append(f"FAIL A/A: {where}: the interval lies outside 1 +- {AA_TOLERANCE:.0%}")
        elif not 1 - AA_TOLERANCE <= fig["lo"] <= fig["hi"] <= 1 + AA_TOLERANCE:
            lines.append(f"NOTE A/A: {where}: not shown within 1 +- {AA_TOLERANCE:.0%} (too few pairs to tell)")
    return lines


def failures(data: dict[str, Any]) -> list[str]:
    """The FAIL lines of a report's data: preflight, null checks, rows, scores and stages that broke. A dry run's
    figures come from stand-in models on the CPU: only its preflight and its stages that broke can fail."""
    lines = [Check(**c).line() for c in data["preflight"] if c["status"] == "FAIL"]
    if data.get("dry_run"):
        return lines + [f"FAIL stage {name}: {error}" for name, error in data["errors"].items()]
    null = data.get("null_checks")
    if null:
        lines += [line for line in _null_lines(null) if line.startswith("FAIL")]
    lines += [line for line in _aa_more_lines(data) if line.startswith("FAIL")]
    for row in data["rows"]:
        lines += _row_failures(row)
    scores = data.get("scores") or {}
    if scores.get("status") == "FAIL":
        lines.append(f"FAIL scores: max |GPU - CPU| {scores['max_abs_diff']:.2e} > {scores['tolerance']:.0e}")
    lines += [f"FAIL stage {name}: {error}" for name, error in data["errors"].items()]
    return lines


def _target(data: dict[str, Any]) -> str | None:
    row = next((r for r in data["rows"] if (r["model"], r["length"], r["batch"], r["image"])
                == (TARGET.model, TARGET.length, TARGET.batch, None)), None)
    if row is None:
        return None
    met = row["speedup"] >= TARGET.speedup and row["of_ideal"] >= TARGET.of_ideal
    return (f"{'PASS' if met else 'TARGET MISSED'} target: {TARGET.model} @{TARGET.length} b{TARGET.batch} "
            f"{row['speedup']:.3f}x (>= {TARGET.speedup}), {row['of_ideal']:.2f} of ideal {row['ideal']:.3f}x "
            f"(>= {TARGET.of_ideal})")


_HEAD = ("| model | prompt | batch | full ms | POP ms | speedup [95% CI] | ideal | meas/ideal "
         "| J/prefill full [interval] (net) | J/prefill POP [interval] (net) | idle W | SM MHz min-max | W max "
         "| °C max | clock reasons | kernels | GPU busy | label |")


def _joules(r: dict[str, Any], side: str) -> str:
    """Gross joules per prefill with its interval (the blocks' median; three blocks: their range, 75%), and net of
    idle power beside it."""
    gross, net = r.get(f"energy_{side}_j"), r.get(f"energy_{side}_net_j")
    lo, hi = r.get(f"energy_{side}_j_lo"), r.get(f"energy_{side}_j_hi")
    if gross is None:
        return "-"
    interval = "" if lo is None or hi is None else f" [{lo:.3g}, {hi:.3g}]"
    return f"{gross:.3g} J{interval}" + ("" if net is None else f" ({net:.3g} J)")


def _table_row(r: dict[str, Any]) -> str:
    prompt = f"{r['image']} ({r['length']} tok)" if r["image"] else str(r["length"])
    if r.get("graphs"):
        prompt += ", graphs" if r.get("timing") == "cuda-graph" else ", graphs asked (eager)"
    if r.get("first"):
        prompt += f" (re-measured; first {r['first']['speedup']:.3f}x [{r['first']['speedup_lo']:.3f}, " \
                  f"{r['first']['speedup_hi']:.3f}])"
    clocks = "-" if r["sm_clock_mhz_min"] is None else f"{r['sm_clock_mhz_min']}-{r['sm_clock_mhz_max']}"
    label = "launch-bound" if r.get("launch_bound") else ("compute" if r.get("launch_bound") is False else "-")
    return (f"| {r['model']} | {prompt} | {r['batch']} | {r['full_ms']:.2f} | {r['pop_ms']:.2f} | "
            f"{r['speedup']:.3f}x [{r['speedup_lo']:.3f}, {r['speedup_hi']:.3f}] | {r['ideal']:.3f}x | "
            f"{r['of_ideal']:.2f} | {_joules(r, 'full')} | {_joules(r, 'pop')} | {_fmt(r.get('idle_w'), '.0f')} | "
            f"{clocks} | {_fmt(r['power_w_max'], '.0f')} | {_fmt(r['temperature_c_max'], 'd')} | "
            f"{', '.join(r['clock_reasons'] or []) or '-'} | {_fmt(r['kernels'], 'd')} | {_fmt(r['busy'], '.0%')} | "
            f"{label} |")


@dataclass
class Report:
    """Everything the check found; :meth:`write` puts it in ``out`` as ``gpu-check.json`` and ``gpu-check.md``."""

    out: Path
    plan: Plan
    device: str
    data: dict[str, Any] = field(default_factory=dict)

    commit: str | None = None

    def __post_init__(self) -> None:
        self.data = {"tiny": self.plan.tiny, "device": self.device, "hardware": None, "preflight": [],
                     "null_checks": None, "aa_more": [], "rows": [], "profiles": {}, "scores": None, "benches": [],
                     "errors": {}, "skipped": {}, "seconds": {}, "expected": {}, "admitted": {}, "notes": [],
                     "kept": [], "dry_run": False, "commit": self.commit, "previous": None}

    @classmethod
    def resume(cls, out: Path, plan: Plan, device: str, commit: str | None = None) -> Report:
        """A report for ``out``: where ``out`` holds a previous run's report of the same plan (full or tiny, not a
        dry run) made at the same commit (``commit``: a clean one, known), the stages it finished -- measured to
        the end, not broken -- are kept with their rows, benches and null checks; the rows of a stage cut short (by
        the time limit or an error) are kept too, and its run again measures only the others; otherwise a new
        report: rows of another commit (or of an unknown or dirty one) are measured again. Rows of another card
        are dropped once the preflight has named this one (:meth:`keep_card`)."""
        report = cls(out, plan, device, commit=commit)
        try:
            old = json.loads((out / "gpu-check.json").read_text())
        except (OSError, ValueError):
            return report
        if old.get("tiny") != plan.tiny or old.get("dry_run"):
            return report
        if not _same_commit(old.get("commit"), commit):
            before = old.get("commit") or "an unknown commit"
            report.data["notes"].append(f"the previous run in this folder was made at {before}, this one at "
                                        f"{commit or 'an unknown commit'}: every row measured again")
            return report
        done = [c.model for c in plan.cases if c.model in old.get("seconds", {}) and c.model not in old["errors"]]
        models = {c.model for c in plan.cases}
        if not done and not any(r["model"] in models for r in old.get("rows", [])):
            return report
        d = report.data
        d["kept"] = done
        d["previous"] = {"commit": old.get("commit"), "hardware_id": (old.get("hardware") or {}).get("hardware_id")}
        d["rows"] = [r for r in old["rows"] if r["model"] in models]  # a cut stage's rows too
        d["benches"] = [b for b in old["benches"] if b.get("model") in models]
        d["null_checks"] = old.get("null_checks")
        d["aa_more"] = old.get("aa_more") or []
        if "scores" in old.get("seconds", {}) and "scores" not in old["errors"] and old.get("scores"):
            done.append("scores")
            d["scores"] = old["scores"]
        for key in ("seconds", "expected", "admitted"):
            d[key] = {name: v for name, v in old.get(key, {}).items() if name in done}
        return report

    def keep_card(self, hardware: dict[str, Any] | None) -> None:
        """Drops what a resumed report kept when the preflight names another card (an H100's rows never stand
        beside an H200's); a no-op when nothing was kept or the card is the same."""
        previous = self.data.get("previous") or {}
        here = (hardware or {}).get("hardware_id")
        if not previous or previous.get("hardware_id") == here:
            return
        fresh = Report(self.out, self.plan, self.device, commit=self.commit).data
        for key in ("kept", "rows", "benches", "null_checks", "aa_more", "scores", "seconds", "expected", "admitted"):
            self.data[key] = fresh[key]
        self.data["previous"] = None
        self.data["notes"].append(f"the previous run in this folder measured {previous.get('hardware_id')}, this is "
                                  f"{here}: every row measured again")

    def board(self) -> str:
        """The board this report belongs to, named by its card: ``leaderboards/gpu-check-<hardware id>.md``."""
        hw = self.data.get("hardware") or {}
        return f"leaderboards/gpu-check-{hw.get('hardware_id') or self.device}.md"

    def add_row(self, row: dict[str, Any], bench: dict[str, Any]) -> None:
        """Records one measured row and its bench record (in place of the same row measured before: a re-measure),
        and writes the report at once."""
        rows = self.data["rows"]
        same = [i for i, r in enumerate(rows) if r["model"] == row["model"] and _key(r) == _key(row)]
        if same:
            rows[same[0]] = row
        else:
            rows.append(row)
        self.data["benches"].append(bench)
        self.write()

    def lines(self) -> list[str]:
        """The summary's status lines: preflight, null checks, scores, skipped stages, target and FAIL lines."""
        d = self.data
        lines = [Check(**c).line() for c in d["preflight"] if c["status"] != "FAIL"]
        lines += [f"NOTE {note}" for note in d["notes"]]
        lines += [f"KEPT {name}: measured by the previous run in this folder" for name in d["kept"]]
        null = d["null_checks"]
        if null:
            lines.append(f"A/A {null['model']} @{null['length']}: {null['aa']['speedup']:.4f} "
                         f"[{null['aa']['lo']:.4f}, {null['aa']['hi']:.4f}], {null['aa']['pairs']} pairs")
            lines.append(f"decode POP/full {null['model']} @{null['length']}: {null['decode']['speedup']:.4f} "
                         f"[{null['decode']['lo']:.4f}, {null['decode']['hi']:.4f}], {null['decode']['pairs']} pairs")
            if not d["dry_run"]:
                lines += [line for line in _null_lines(null) if line.startswith("NOTE")]
        for extra in d.get("aa_more") or []:
            lines.append(f"A/A {extra['model']} @{extra['length']}: {extra['aa']['speedup']:.4f} "
                         f"[{extra['aa']['lo']:.4f}, {extra['aa']['hi']:.4f}], {extra['aa']['pairs']} pairs")
        if not d["dry_run"]:
            lines += [line for line in _aa_more_lines(d) if line.startswith("NOTE")]
            lines += [f"NOTE wide: {r['model']} {r['image'] or r['length']} b{r['batch']} {r['speedup']:.3f}x "
                      f"[{r['speedup_lo']:.3f}, {r['speedup_hi']:.3f}] wider than +-{self.plan.policy.precision:.0%} "
                      f"after {'a re-measure' if r.get('first') else 'its pairs (no time left to re-measure)'}"
                      for r in d["rows"] if wide(r, self.plan.policy.precision)]
        scores = d["scores"]
        if scores and scores["status"] != "FAIL":
            detail = (f"{scores['model']} skip {scores['skip']}, {scores['items']} items, max |GPU - CPU| "
                      f"{scores['max_abs_diff']:.2e}" if scores["status"] == "PASS" else scores["reason"])
            lines.append(f"{scores['status']} scores: {detail}")
        lines += [f"SKIP {name}: {why}" for name, why in d["skipped"].items()]
        if d["dry_run"]:
            lines += [f"DRY {name}: its code path ran on stand-ins in {seconds} s (on the device: expected "
                      f"{d['expected'].get(name, 0):.0f} s)" for name, seconds in d["seconds"].items()]
        target = _target(d)
        return lines + ([target] if target else []) + failures(d)

    def markdown(self) -> str:
        hw = self.data["hardware"] or {}
        dry = "DRY RUN on stand-in models (no figure below is a measurement), " if self.data["dry_run"] else ""
        head = [f"# GPU check ({dry}{'tiny, ' if self.plan.tiny else ''}{hw.get('name', self.device)})", "",
                f"Board: `{self.board()}` (named by the card). Commit {self.data.get('commit') or 'unknown'}.", "",
                f"Device {self.device}; driver {hw.get('driver_version')}; torch {hw.get('torch_version')}; "
                f"seconds per stage {json.dumps(self.data['seconds'])}; expected by the plan "
                f"{json.dumps(self.data['expected'])}.", "", "```"]
        table = [_HEAD, "|" + "---|" * _HEAD.count(" | ") + "---|"] + [_table_row(r) for r in self.data["rows"]]
        return "\n".join(head + self.lines() + ["```", ""] + table) + "\n"

    def write(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "gpu-check.json").write_text(json.dumps(self.data, indent=1, default=str) + "\n")
        (self.out / "gpu-check.md").write_text(self.markdown())
