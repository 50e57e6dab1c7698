"""The prompts workload's lines of a study's report: per front row, the share of answers unchanged with its
exact interval and the prompts behind it, the fidelity figures, and the drop on the references when given;
above them the null reference (:mod:`poptune.evaluate.nullref`), in the same words, so that POP's change rate
is read beside the one this model's own numerical noise makes. Never a prompt's text: only counts and means
(the study stores nothing more)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from poptune.objectives.accuracy import ACCURACY

if TYPE_CHECKING:
    from poptune.problem.problem import TuningProblem
    from poptune.store.attributes import StoredStudy
    from poptune.store.front import FrontRow
    from poptune.store.trials import StoredTrial

__all__ = ["AccuracyColumn", "accuracy_column", "null_line", "prompts_lines"]


@dataclass(frozen=True)
class AccuracyColumn:
    """A table's accuracy column where accuracy is not a task score: its title, each row's cell, and a note, in
    place of the column of ``objective``."""

    title: str
    cell: Callable[["FrontRow"], str]
    note: str
    objective: str = ACCURACY.name


def _looks(stored: "StoredStudy", *, certified: bool) -> int:
    """The planned looks of the search's racing, or of the certification's (each spends its error over them)."""
    from poptune.evaluate.workload import rounds
    from poptune.problem.problem import TuningProblem
    from poptune.tune.certify import certification_policy

    problem = TuningProblem.from_dict(stored.problem)
    policy = certification_policy(problem) if certified else problem.racing()
    return len(rounds(policy.start, policy.cap, policy.growth))


def _unchanged(changed: int, n: int, looks: int) -> tuple[str, float]:
    """``"k/n = x% [lo, hi]"``: the answers unchanged, their share and its exact interval; and the one-sided
    upper bound of the share changed ("changed at most")."""
    from poptune.evaluate.changed import changed_interval

    ci = changed_interval(changed, n, looks=looks)
    text = f"{n - changed}/{n} = {100 * (1 - ci.point):.1f}% [{100 * (1 - ci.hi):.1f}, {100 * (1 - ci.lo):.1f}]"
    return text, changed_interval(changed, n, looks=looks, one_sided=True).hi


def accuracy_column(stored: "StoredStudy", *, certified: bool = False) -> AccuracyColumn | None:
    """A prompts study's accuracy column: per row, the answers unchanged out of the prompts scored, their share
    and its exact Clopper-Pearson 95% interval (:func:`poptune.evaluate.changed.changed_interval`, Bonferroni over
    the search's planned looks, or the certification's for ``certified`` rows); None for any other study."""
    from poptune.evaluate.prompts import PROMPTS
    from poptune.problem.problem import TuningProblem

    if PROMPTS not in TuningProblem.from_dict(stored.problem).tasks:  # judged on references: a task's score
        return None
    looks = _looks(stored, certified=certified)

    def cell(row: "FrontRow") -> str:
        n = int(row.items or 0)
        if not row.skip or not n:
            return "100% (reference)" if not row.skip else f"{100 * row.accuracy:.1f}%"
        return _unchanged(int(round(n * (1 - row.accuracy))), n, looks)[0]

    return AccuracyColumn(
        "unchanged [exact 95% CI]", cell,
        "unchanged: the prompts whose greedy answer is the full model's, out of those scored, with the exact "
        f"Clopper-Pearson 95% interval of their share (Bonferroni over {looks} planned looks); the full model's "
        "answers are the reference")


def prompts_lines(stored: "StoredStudy", trials: Sequence["StoredTrial"], rows: Sequence["FrontRow"]) -> list[str]:
    """Lines for the ``rows`` (the front's, then the reference rows') of a prompts study (empty for any other
    study), from its ``trials``: per POP row the answers unchanged with their exact interval, the fidelity
    figures and, with references, their drop; for the full model, the share of its answers holding them."""
    from poptune.problem.problem import TuningProblem

    problem = TuningProblem.from_dict(stored.problem)
    if problem.prompts is None:
        return []
    record = stored.prompts or {}
    looks = _looks(stored, certified=False)
    by_number = {t.number: t for t in trials}
    fitting = len(record["index"]) if "index" in record else \
        int(record.get("requests", 0)) - int(record.get("skipped_too_long", 0))  # the workload's items
    searched = min(problem.limit or fitting, fitting)
    fresh = min(problem.certify_limit, fitting - searched) if problem.certifies else 0
    lines = [f"prompts: {record.get('requests', '?')} requests, {record.get('skipped_too_long', 0)} skipped as too "
             f"long; up to {searched} searched, {fresh} more kept fresh to certify; {_judged(problem, record, looks)}"]
    if stored.prompts_null:
        lines.append("  " + null_line(stored.prompts_null))
    shown: set[int] = set()
    for row in rows:
        trial = by_number.get(row.trial)
        if row.trial in shown or trial is None:
            continue
        shown.add(row.trial)
        figures = trial.details.get("prompts") or {}
        ref = trial.details.get("reference")
        n = int(figures.get("items") or row.items or 0)
        if not row.skip:
            if ref:
                lines.append(f"  full model: references held by {100 * ref['full']:.1f}% of its answers "
                             f"({ref['items']} prompts with a reference)")
            continue
        if not n:
            continue
        text, at_most = _unchanged(int(round(figures.get("changed", n * (1 - row.accuracy)))), n, looks)
        line = f"  {row.label}: unchanged {text}; changed at most {100 * at_most:.1f}% at 95%"
        if figures.get("agreement") is not None:
            line += f"; token agreement {100 * figures['agreement']:.1f}%"
        if figures.get("median_divergence") is not None:
            line += f", median first divergence at token {figures['median_divergence']}"
        line += _likelihoods(figures)
        lines.append(line)
        if ref:
            d = ref["drop"]
            lines.append(f"    references ({ref['items']} prompts): full {100 * ref['full']:.1f}%, POP "
                         f"{100 * ref['pop']:.1f}%, drop {d['mean']:+.2f} [{d['lo']:+.2f}, {d['hi']:+.2f}] pts")
    return lines


def _judged(problem: "TuningProblem", record: dict[str, Any], looks: int) -> str:
    """What the study's accuracy is, by the task its ``--judge`` made."""
    from poptune.evaluate.prompts import LIKELIHOOD, REFERENCES

    unchanged = f"exact Clopper-Pearson 95% interval (Bonferroni over {looks} planned looks)"
    if REFERENCES in problem.tasks:
        return (f"accuracy = share of answers containing their reference ({record.get('references', '?')} requests "
                "have one), the drop paired against the full model's (95% interval over the planned looks); "
                f"unchanged: {unchanged}")
    if LIKELIHOOD in problem.tasks:
        return ("accuracy = mean probability of the full answer's tokens under each configuration's prefill, the "
                "drop paired against the full model's (95% interval over the planned looks; the null reference's "
                f"drop is this model's own noise); unchanged: {unchanged}")
    return f"accuracy = share of greedy answers unchanged from the full model's, {unchanged}; references: paired " \
           "drop with its 95% interval"


def _likelihoods(figures: dict[str, Any]) -> str:
    """``"; full answer's log-lik/token ...; its token probability ..."``: the continuous figures beside a row."""
    text = ""
    if figures.get("loglik") is not None and figures.get("full_loglik") is not None:
        text += f"; full answer's log-lik/token {figures['loglik']:.3f} (full {figures['full_loglik']:.3f})"
    if figures.get("prob") is not None and figures.get("full_prob") is not None:
        text += f", token probability {100 * figures['prob']:.1f}% (full {100 * figures['full_prob']:.1f}%)"
    return text


def null_line(null: dict[str, Any]) -> str:
    """The null reference in a front row's words (:mod:`poptune.evaluate.nullref`): the full model's answers
    under a harmless change, unchanged with their exact 95% interval (one look: measured once), and the paired
    drop of its mean answer-token probability, the noise floor of ``--judge likelihood``."""
    n = int(null["items"])
    text, at_most = _unchanged(int(round(null["changed"])), n, 1)
    line = (f"null reference (the full model again: {null.get('perturbation', 'perturbed')}): unchanged {text}; "
            f"changed at most {100 * at_most:.1f}% at 95%")
    if null.get("agreement") is not None:
        line += f"; token agreement {100 * null['agreement']:.1f}%"
    if null.get("median_divergence") is not None:
        line += f", median first divergence at token {null['median_divergence']}"
    drop = null.get("prob_drop")
    if drop:
        line += (f"; answer-token probability drop {drop['mean']:+.2f} [{drop['lo']:+.2f}, {drop['hi']:+.2f}] pts "
                 "(paired, 95%)")
    return line
