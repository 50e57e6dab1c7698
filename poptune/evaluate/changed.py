"""An exact bound on the share of answers a configuration changes: "answers changed at most X% at 95%".

Each scored prompt is a 0/1 indicator, *changed* (the configuration's greedy answer is not the full model's);
they are independent draws from the workload's prompts, so the number changed out of ``n`` is binomial and
its share gets the exact Clopper-Pearson interval (Clopper and Pearson 1934: the ends are quantiles of beta
distributions, :func:`scipy.stats.beta.ppf`). Its coverage is *at least* the nominal level for every ``n`` and
every true share (conservative, never approximate).

**Several looks.** Racing looks at the same growing sample after every round (:mod:`poptune.evaluate.racing`),
and a bound read at the look that happens to suit it is not a 95% bound. :func:`changed_interval` therefore
spends the error over the planned looks by Bonferroni: with ``looks`` rounds planned, each look's bound is at
``1 - alpha / looks``, so the chance that *any* look's bound misses the true share is at most ``alpha``
(``tests/evaluate/test_changed.py`` checks this by a seeded simulation). The study's *decisions* (within or
beyond the budget) still come from the paired drop's score test over the race's planned design
(:mod:`poptune.evaluate.paired`) on the same 0/1 indicator, the full model's outcome being 1 on every prompt:
this module's interval is what the report prints beside them, exact and valid over the same looks.
"""

from __future__ import annotations

from poptune.errors import ConfigError
from poptune.interval import Interval

__all__ = ["changed_interval"]


def changed_interval(changed: int, items: int, *, confidence: float = 0.95, looks: int = 1,
                     one_sided: bool = False) -> Interval:
    """The share changed, ``changed / items`` (in [0, 1]), with its exact interval (module docstring).

    Two-sided: the Clopper-Pearson ends at ``confidence``, each look's at ``1 - (1 - confidence) / looks``.
    ``one_sided``: the interval ``[0, upper]`` instead, ``upper`` the one-sided bound at the same level per look:
    "changed at most ``upper``". The interval's ``level`` is the overall ``confidence``, over all the looks.

    Example: ``changed_interval(3, 30)`` is ``0.1 [0.0211, 0.2653]``; ``changed_interval(0, 40, one_sided=True).hi``
    is ``1 - 0.05 ** (1 / 40)`` (the rule of three's exact form).

    Raises:
        ConfigError: counts out of range, a confidence outside (0, 1), fewer than one look.
    """
    from scipy.stats import beta

    if items < 1 or not 0 <= changed <= items:
        raise ConfigError(f"need 0 <= changed <= items and items >= 1, got {changed} of {items}")
    if not 0 < confidence < 1:
        raise ConfigError(f"`confidence` must be in (0, 1), got {confidence}")
    if looks < 1:
        raise ConfigError(f"`looks` must be >= 1, got {looks}")
    alpha = (1 - confidence) / looks
    k, n = changed, items
    if one_sided:
        return Interval(k / n, 0.0, 1.0 if k == n else float(beta.ppf(1 - alpha, k + 1, n - k)), confidence)
    lo = 0.0 if k == 0 else float(beta.ppf(alpha / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - alpha / 2, k + 1, n - k))
    return Interval(k / n, lo, hi, confidence)
