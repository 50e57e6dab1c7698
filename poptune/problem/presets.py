"""Study sizes by name: how many configurations, items and timing pairs a study spends.

``standard`` is the default and the library's defaults (:class:`~poptune.problem.problem.TuningProblem`,
:class:`~poptune.tune.study.StudySpec`) are its values; an option given explicitly overrides its preset's value.
The README gives each preset's measured duration on this project's 2-core CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Preset", "PRESETS", "DEFAULT_PRESET", "STANDARD", "prompts_split", "sized"]


@dataclass(frozen=True)
class Preset:
    """A study's size.

    Attributes:
        trials: Measured configurations (the study's total).
        items: Items per task in the first racing round.
        limit: Items per task at most (the racing cap).
        long_limit: The cap on the long-prompt pack (``longctx_*`` tasks), whose items cost several times more
            (a generated answer after a 1,000-token prefill): what keeps the data directory's default study
            within 30 minutes on a 2-core CPU.
        max_pairs: Most POP/full timing pairs per latency measurement and length; at least
            :data:`~poptune.measure.stats.MIN_PAIRS_95` (6), the fewest whose 95% interval of the speedup reaches
            95% (a problem's ``repeats``, 6 by default, are the least).
        max_seconds: Most seconds per latency measurement and length while chasing the precision.
        certify, long_certify: Fresh items per task a certification takes when it is not planned (the library's
            default; the command line's ``--certify N``).
        plan, long_plan: The most fresh items per task a planned certification may take (the command line's
            default, :func:`poptune.tune.certify.plan_certification`): it takes what a verdict needs at the
            search's flip rate, within the time budget.
    """

    trials: int
    items: int
    limit: int
    max_pairs: int
    max_seconds: float
    long_limit: int
    certify: int = 0
    long_certify: int = 0
    plan: int = 0
    long_plan: int = 0

    def certify_for(self, tasks: tuple[str, ...]) -> int:
        """The certification cap of a study of ``tasks`` (:attr:`long_certify` on the long-prompt pack)."""
        return self.long_certify if tasks and all(t.startswith("longctx") for t in tasks) else self.certify

    def plan_for(self, tasks: tuple[str, ...]) -> int:
        """The most items per task a planned certification of ``tasks`` may take (:attr:`long_plan` on the pack)."""
        return self.long_plan if tasks and all(t.startswith("longctx") for t in tasks) else self.plan

    def limit_for(self, tasks: tuple[str, ...]) -> int:
        """The item cap of a study of ``tasks``: :attr:`long_limit` when all are of the long-prompt pack."""
        return self.long_limit if tasks and all(t.startswith("longctx") for t in tasks) else self.limit


STANDARD = Preset(trials=8, items=8, limit=32, max_pairs=20, max_seconds=3.0, long_limit=32, certify=128,
                  long_certify=16, plan=1024, long_plan=512)

PRESETS: dict[str, Preset] = {
    "quick": Preset(trials=4, items=8, limit=16, max_pairs=10, max_seconds=2.0, long_limit=16, certify=64,
                    long_certify=16, plan=256, long_plan=64),
    "standard": STANDARD,
    "thorough": Preset(trials=24, items=16, limit=64, max_pairs=40, max_seconds=6.0, long_limit=64, certify=512,
                       long_certify=128, plan=2048, long_plan=512),
}

DEFAULT_PRESET = "standard"


def sized(name: str | None = None, **given: int | float | None) -> Preset:
    """The preset ``name`` (default: :data:`DEFAULT_PRESET`) with the sizes given explicitly in its place.

    Args:
        name: A key of :data:`PRESETS`, or None for the default.
        **given: Fields of :class:`Preset` (``trials``, ``items``, ``limit``, ``max_pairs``, ``max_seconds``);
            a None value keeps the preset's.
    """
    from dataclasses import replace

    changes: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
    return replace(PRESETS[name or DEFAULT_PRESET], **changes)


def prompts_split(requests: int, limit: int, certify: int) -> tuple[int, int]:
    """The search cap and the certification cap of a prompts file of ``requests`` requests.

    A file that holds ``limit + certify`` requests or more keeps both. A smaller one (a user's few dozen
    prompts) is halved in its fixed order: the first half is searched (at most ``limit``), the rest certifies,
    so that the verdict is given on as many fresh prompts as the search saw, never on a leftover two.
    """
    if requests >= limit + certify or certify == 0:
        return limit, certify
    search = min(limit, max(1, requests // 2))
    return search, requests - search
