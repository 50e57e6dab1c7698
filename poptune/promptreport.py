"""The prompts workload's lines of a study's report: per front row, the share of answers unchanged with its
exact interval and the prompts behind it, the fidelity figures, and the drop on the references when given.
Never a prompt's text: only counts and means (the study stores nothing more)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from poptune.store.attributes import StoredStudy
    from poptune.store.front import FrontRow
    from poptune.store.trials import StoredTrial

__all__ = ["prompts_lines"]


def prompts_lines(stored: "StoredStudy", trials: Sequence["StoredTrial"], rows: Sequence["FrontRow"]) -> list[str]:
    """Lines for the front ``rows`` of a prompts study (empty for any other study), from its ``trials``."""
    from poptune.evaluate.changed import changed_interval
    from poptune.evaluate.workload import rounds
    from poptune.tune.problem import TuningProblem

    problem = TuningProblem.from_dict(stored.problem)
    if problem.prompts is None:
        return []
    record = stored.prompts or {}
    policy = problem.racing()
    looks = len(rounds(policy.start, policy.cap, policy.growth))
    by_number = {t.number: t for t in trials}
    lines = [f"prompts: {record.get('requests', '?')} requests, {record.get('skipped_too_long', 0)} skipped as too "
             "long;"
             f" accuracy = share of greedy answers unchanged from the full model's, exact Clopper-Pearson 95% "
             f"interval (Bonferroni over {looks} planned looks)"]
    for row in rows:
        trial = by_number.get(row.trial)
        figures = (trial.details.get("prompts") if trial else None) or {}
        n = int(figures.get("items") or row.items or 0)
        if not row.skip or not n:
            continue
        changed = int(round(figures.get("changed", n * (1 - row.accuracy))))
        ci = changed_interval(changed, n, looks=looks)
        line = (f"  skip {row.skip:>2} {row.boundary:<9} offset {row.offset}: unchanged {n - changed}/{n} = "
                f"{100 * (1 - ci.share):.1f}% [{100 * (1 - ci.hi):.1f}, {100 * (1 - ci.lo):.1f}]; changed at most "
                f"{100 * ci.upper:.1f}% at 95%")
        if figures.get("agreement") is not None:
            line += f"; token agreement {100 * figures['agreement']:.1f}%"
        if figures.get("median_divergence") is not None:
            line += f", median first divergence at token {figures['median_divergence']}"
        if figures.get("loglik") is not None and figures.get("full_loglik") is not None:
            line += f"; full answer's log-lik/token {figures['loglik']:.3f} (full {figures['full_loglik']:.3f})"
        lines.append(line)
        ref = trial.details.get("reference") if trial else None
        if ref:
            d = ref["drop"]
            lines.append(f"    references ({ref['items']} prompts): full {100 * ref['full']:.1f}%, POP "
                         f"{100 * ref['pop']:.1f}%, drop {d['mean']:+.2f} [{d['lo']:+.2f}, {d['hi']:+.2f}] pts")
    return lines
