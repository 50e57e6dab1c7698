"""What a study's certification says: the verdict line, each candidate's claim, and what deciding it costs.

A verdict states the claim that is certified, a bound: ``drop <= 1.71 points (one-sided 97.5%, valid at every
look)``. A race that stopped before its planned items stopped because of what it saw, so its mean drop (and the
accuracy beside it) is read at a data-dependent stop, biased toward the decision: such a row says so. An
undecided candidate says what a verdict would take on this machine: the items at the flip rate it showed, their
minutes at the seconds per item measured here, the command that spends them, and the smallest budget the
planned items could certify (:func:`poptune.evaluate.racing.verdict_cost`, stored by
:mod:`poptune.tune.certify`).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from poptune.evaluate.judges import ACCURACY_JUDGE, LIKELIHOOD_JUDGE
from poptune.evaluate.paired import PairedDrop
from poptune.store.front import FrontRow
from poptune.tune.certify import ERROR, WITHIN, spent_error

__all__ = ["accuracy_lines", "budget_words", "claim", "verdict_cells", "verdict_line", "cost_lines", "bound_points",
           "likelihood_column", "plot_labels"]

#: What a likelihood judge's points are, said wherever its budget or verdict is (never an accuracy claim).
LIKELIHOOD_MEANING = ("the paired drop, x100, of the mean probability of the full model's answer tokens under each "
                      "configuration's prefill; a likelihood verdict, not an accuracy one")


def budget_words(budget: float, judge: str = ACCURACY_JUDGE) -> str:
    """``the budget of 2 points`` (accuracy), or the likelihood budget with its meaning."""
    if judge == LIKELIHOOD_JUDGE:
        return f"the likelihood budget of {budget:g} points ({LIKELIHOOD_MEANING})"
    return f"the budget of {budget:g} points"


def _one_sided(record: Mapping[str, Any]) -> float:
    """The one-sided level of a record's bound, in %, rounded off float noise (98.75, not 98.75000000000001)."""
    return round(100 * (1 - (1 - float(record["confidence"])) / 2), 9)


def _entries(record: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    return list((record or {}).get("candidates", []))


def claim(entry: Mapping[str, Any], record: Mapping[str, Any]) -> str:
    """What a raced candidate's fresh items certify: the bound on the side its verdict is on (the upper one
    while undecided), with the level it holds at over every look."""
    if entry.get("drop") is None:
        return ""
    drop = PairedDrop.from_dict(entry["drop"])
    beyond = str(entry.get("verdict", "")).startswith("certified beyond")
    bound = f"drop > {drop.lo:.2f}" if beyond else f"drop <= {drop.hi:.2f}"
    return f"{bound} points (one-sided {_one_sided(record):.6g}%, valid at every look)"  # 98.75%, never 98.8%


def _stop_note(entry: Mapping[str, Any]) -> str:
    drop = PairedDrop.from_dict(entry["drop"]) if entry.get("drop") else None
    if drop is None or not drop.stopped_early:
        return ""
    return (f"stopped at {drop.total} of {drop.planned} planned items: its drop and accuracy are read at that "
            "data-dependent stop")


def verdict_cells(rows: Sequence[FrontRow], record: Mapping[str, Any] | None) -> list[str]:
    """The certified table's verdict column: each row's verdict, its claim, and a stop note where it stopped
    early."""
    entries = _entries(record)
    cells = []
    for i, row in enumerate(rows):
        entry = entries[i] if i < len(entries) else {}
        parts = [row.verdict or ""]
        if entry and record:
            parts += [p for p in (claim(entry, record), _stop_note(entry)) if p]
        cells.append("; ".join(parts))
    return cells


def _attempts(record: Mapping[str, Any]) -> str:
    """For a study certified more than once: the attempts and the error they have spent together (their sum)."""
    count = len(record.get("attempts", [])) + 1
    if count == 1:
        return ""
    spent = spent_error(dict(record))
    return f" (certification {count} of this study; together they spent {100 * spent:.3g}% of {100 * ERROR:g}% error)"


def _speed_source(row: FrontRow, confirmations: Mapping[str, Any] | None) -> str:
    figures = (confirmations or {}).get(str(row.trial), {})
    if figures.get("retimed"):
        return "timed again after the closing A/A check failed"
    return "confirmation pass" if row.confirmed else "its search trial"


def verdict_line(rows: Sequence[FrontRow], record: Mapping[str, Any] | None, budget: float | None,
                 confirmations: Mapping[str, Any] | None = None, judge: str = ACCURACY_JUDGE,
                 runtime: str = "hf") -> str:
    """What the certification decided, in one line: the fastest configuration certified within the budget and
    the bound it is certified at, or why none is; ``confirmations`` (the study's confirmed figures by trial)
    say which timing its speed comes from; ``judge``: what the budget bounds (a likelihood verdict says so);
    ``runtime``: the engine that timed and scored it, named unless it is poptune's own."""
    line = _verdict(rows, record, budget, confirmations, judge)
    return line if runtime == "hf" else f"{line} [runtime {runtime}: timed and scored through it]"


def _verdict(rows: Sequence[FrontRow], record: Mapping[str, Any] | None, budget: float | None,
             confirmations: Mapping[str, Any] | None, judge: str) -> str:
    if budget is None:
        return f"no {judge} budget: nothing to certify"
    if not record:
        return "not certified: the study has no certification on fresh items (a run with trials to measure makes one)"
    entries = _entries(record)
    for row, entry in zip(rows, entries):
        if row.verdict == WITHIN:
            speed = f"{row.speedup:.2f}x faster to the first token" + (
                f" {row.speedup_ci.bracket('.2f')} over {row.pairs} pairs"
                if row.speedup_ci is not None else "") + f" ({_speed_source(row, confirmations)})"
            return (f"verdict: {row.label} is certified within {budget_words(budget, judge)}: "
                    f"{claim(entry, record)} on {row.items} fresh items; {speed}" + _attempts(record))
    if not rows:
        return (f"verdict: no configuration faster than the full model was a candidate within "
                f"{budget_words(budget, judge)}")
    hint = "" if any(e.get("cost") for e in entries) else \
        " (a larger --certify or the thorough preset scores more fresh items)"  # a record stored without costs
    parts = []
    for i, row in enumerate(rows):
        said = claim(entries[i], record) if i < len(entries) and row.verdict != "not certified" else ""
        parts.append(f"{row.label}: {row.verdict}" + (f", {said}" if said else ""))
    return (f"verdict: no configuration is certified within {budget_words(budget, judge)}; "
            + "; ".join(parts) + hint + _attempts(record))


def _command(runs: Sequence[Mapping[str, Any]], per_task: int) -> str:
    """The last run's command with ``--certify per_task`` in place of any it had."""
    argv = list((runs[-1].get("command") if runs else None) or ["poptune", "study"])
    kept: list[str] = []
    skip = False
    for arg in argv[1:]:
        if skip:
            skip = False
            continue
        if arg == "--certify":
            skip = True
            continue
        if not arg.startswith("--certify="):
            kept.append(arg)
    return "poptune " + shlex.join([*kept, "--certify", str(per_task)])


def cost_lines(rows: Sequence[FrontRow], record: Mapping[str, Any] | None, budget: float | None,
               runs: Sequence[Mapping[str, Any]], judge: str = ACCURACY_JUDGE) -> list[str]:
    """For each undecided candidate: the items and minutes a verdict within ``budget`` needs here, the command
    that spends them, and the smallest budget the planned items can certify; under the likelihood judge, for each
    raced candidate, what an accuracy verdict on the same tasks would cost. First, where the plan passed over the
    fastest candidate (its verdict more than the time could buy), why."""
    if budget is None or not record:
        return []
    passed = record.get("passed_over")
    lines = [passed["line"]] if passed and passed.get("line") else []  # the fastest, whose verdict time could not buy
    kind = "likelihood " if judge == LIKELIHOOD_JUDGE else ""
    for row, entry in zip(rows, _entries(record)):
        lines += accuracy_lines(row, entry) + _accuracy_cost_line(row, entry, budget)
        cost = entry.get("cost")
        if not cost or not str(row.verdict).startswith("undecided"):
            continue
        planned = PairedDrop.from_dict(entry["drop"]).planned if entry.get("drop") else 0
        rate = f"items flip at the {100 * cost['flip_rate']:.1f}% rate seen so far" if not kind else \
            f"items move by {cost['rms_points']:.1f} points (root mean square) seen so far" if "rms_points" in cost \
            else f"items move by the {100 * cost['flip_rate']:.1f} points on average seen so far"  # stored before
        lines.append(
            f"{row.label}: {row.verdict}: a {budget:g}-point {kind}verdict needs about {cost['items']:,} items here "
            f"(~{cost['minutes']:.0f} min at {cost['seconds_per_item']:.1f} s per item) for "
            f"{100 * cost['power']:.0f}% power if the true drop is 0 and {rate}: "
            f"{_command(runs, int(cost['per_task']))}; the smallest budget the {planned:,} planned items certify as "
            f"often at this {'' if kind else 'flip '}rate: about {cost['smallest_budget']:.1f} points")
    return lines


def accuracy_lines(row: FrontRow, entry: Mapping[str, Any]) -> list[str]:
    """Beside a likelihood verdict, the accuracy it did not judge, on the same fresh items: the paired drop of the
    tasks' own metric with its own 95% interval, never certified, and the share of items whose answer changed
    (:func:`poptune.tune.certify.accuracy_drop`). Nothing for a record stored without it."""
    said = entry.get("accuracy_drop")
    if not said or not said.get("drop"):
        return []
    drop = PairedDrop.from_dict(said["drop"])
    line = (f"{row.label}: accuracy drop on the same items: {drop.mean:+.2f} [{drop.lo:+.2f}, {drop.hi:+.2f}] points "
            f"(tasks' own metric, {100 * drop.confidence:g}%, not certified)")
    if said.get("answers"):
        line += (f"; answer changed on {said['changed']} of {said['answers']} items "
                 f"({100 * said['changed'] / said['answers']:.1f}%)")
    return [line]


#: How often seeded races of F1-like grades (0, 1 and partial) certify within the budget at true drop 0 at the size
#: :func:`poptune.tune.certify.accuracy_cost` gives for 80% (10% and 37% of items regraded, sized from 256 graded
#: items or from the spread itself): ``benchmarks/pipeline_errors.py``, ``leaderboards/decision-errors-simulated-*``.
F1_SIMULATED = "75-80%"


def _accuracy_cost_line(row: FrontRow, entry: Mapping[str, Any], budget: float) -> list[str]:
    """Beside a likelihood verdict: what an accuracy verdict on the same tasks would cost, from how far the
    candidate's fresh items' grades by the tasks' own metric moved (:func:`poptune.tune.certify.accuracy_cost`):
    the mean squared change, said as its root in points, is not a share of items (an F1 grade moves by part of a
    point). Its power is the score test's normal approximation at that spread, which the seeded races of F1-like grades
    do not reach (:data:`F1_SIMULATED`): the line says what they reach, not 80%."""
    cost = entry.get("accuracy_cost")
    if not cost:
        return []
    return [f"{row.label}: beside its likelihood verdict, an accuracy verdict (the tasks' own metric) within "
            f"{budget:g} points needs about {cost['items']:,} items here (~{cost['minutes']:.0f} min at "
            f"{cost['seconds_per_item']:.1f} s per item), the normal approximation's size for "
            f"{100 * cost['power']:.0f}% power if the true drop is 0, which seeded races of F1-like grades of that "
            f"size reach only {F1_SIMULATED} of the time (a planning figure, not a promise): "
            f"{cost['flipped']} of its {cost['graded']:,} fresh items changed grade, the grades moving by "
            f"{100 * cost['flip_rate'] ** 0.5:.1f} points (root mean square, one more move of the size seen "
            "counted in)"]


def likelihood_column() -> Any:
    """The tables' accuracy column of a likelihood-judged study, named by what it is: the mean probability of the
    full model's answer tokens (%), not an accuracy (:class:`poptune.reports.prompts_lines.AccuracyColumn`)."""
    from poptune.reports.prompts_lines import AccuracyColumn

    return AccuracyColumn("answer prob", lambda row: f"{100 * row.accuracy:.2f}%",
                          "answer prob: the mean probability of the full model's answer tokens under each "
                          "configuration's prefill (%; the full model's on the reference items minus the paired "
                          "likelihood drop): the likelihood judge's outcome, not the tasks' accuracy")


def plot_labels(budget: float | None, judge: str = ACCURACY_JUDGE) -> tuple[str, str]:
    """The plot's y-axis label and its budget line's label: what the study's judge measures, and the certified
    bound's meaning (a certified point's lower bar is its bound at the certification's own level, never "95%")."""
    line = ("budget: none" if budget is None else
            f"budget: drop <= {budget:g} points (a certified point's lower bar, its certified bound, above the line)")
    if judge == LIKELIHOOD_JUDGE:
        return "mean probability of the full answer's tokens (%)", f"likelihood {line}"
    return "mean accuracy (%)", f"accuracy {line}"


def bound_points(rows: Sequence[FrontRow], record: Mapping[str, Any] | None, full_accuracy: float) -> dict[str, Any]:
    """The plot's certified candidates (legend name -> point): each at ``full_accuracy`` (%) minus its certified
    upper bound, the bar spanning its fresh items' interval, so the plot shows the claim, not the search's
    figures."""
    from poptune.plots import PlotPoint

    points = {}
    for row, entry in zip(rows, _entries(record)):
        if not entry.get("drop") or row.verdict == "not certified":
            continue
        drop = PairedDrop.from_dict(entry["drop"])
        speed = row.speedup_ci.ends() if row.speedup_ci is not None else None
        points[f"{row.label}: {row.verdict}, drop <= {drop.hi:.2f}"] = PlotPoint(
            row.speedup, full_accuracy - drop.hi, "", speed, (full_accuracy - drop.hi, full_accuracy - drop.lo))
    return points
