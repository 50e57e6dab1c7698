"""Paired accuracy drops: the full model and a configuration scored on the same items, item by item.

The drop of a suite is the mean over its tasks of each task's mean per-item difference (full minus
configuration, in points). Most items come out the same under a mild configuration, so pairing makes the
interval far narrower than two separate ones; but an interval never collapses while items could still flip.

**Method.** For metrics in [0, 1] (correct/incorrect, F1, exact match) each item's difference ``d = full -
configuration`` lies in [-1, 1]. Each end of the interval is the inversion of a one-sided **score test** of the
paired difference, the test of Tango, "Equivalence test and confidence interval for the difference in proportions
for the paired-sample design", Statistics in Medicine 17, 891-908 (1998): a candidate drop ``m`` is rejected when
the mean difference is ``c`` standard errors away from it, the standard error taken at ``m`` itself (the restricted
maximum-likelihood variance of the losses and gains under ``drop = m``). Taking the variance under the hypothesis is
what keeps the error when few items flip: no flip in n items is no evidence against a drop carried by rare losses,
and the interval stays open (about the exact binomial bound's size, ``1.96^2 / n`` above 0), never [0, 0].
Fractional differences (F1, a likelihood judge's probabilities) are fitted the same way by the empirical likelihood
over the items' differences and the scale's two ends (:func:`el_moments`, Owen 2001; Tango's fit is its case of
-1, 0 and 1): the variance then rests on how far the items moved (their squares), not on how many moved, while a
drop the items seen cannot carry is still carried by mass at the scale's end, so rare large losses stay
possible (no movement gives the binary bound). Taking each move for that share of a flip, as before, overstated
the variance of an outcome whose every item moves a little: a 2-point likelihood verdict on the long-prompt pack
was planned at about 1,300 items, now about 320 (``leaderboards/likelihood-verdict-cost-*``). A
suite's tasks are averaged, each with its own variance, the candidate shifting every task's mean by the same amount:
one method whatever the tasks' counts. A continuity correction of half the mean's lattice step (``1 / (2 n)``; half
of Edwards' correction in McNemar's test) keeps the discrete outcomes' error at or under the stated level at small
counts. Where the mean's skewness under the candidate (same fit) makes the tail a bound rejects in heavier than the
normal one (rare losses: a long upper tail, so the lower end), the critical value is raised by the Cornish-Fisher
term ``skewness (c^2 - 1) / 6`` (Cornish and Fisher 1937; Hall, *The Bootstrap and Edgeworth Expansion*, 1992); it
is never lowered. Without it, and with O'Brien-Fleming spending on both ends, the simulated "beyond budget" error of
a configuration that only loses (2% of items) reached 2.65-2.87% at 1,000-1,250 items per task; with both ends as
below it is 2.0-2.1%.

**Looks.** A race looks at the drop after each planned round; ``c`` at each look comes from the
group-sequential design of :mod:`poptune.evaluate.groupseq` over the race's planned item counts (``looks``
and ``planned``), so each end is wrong with probability at most ``(1 - confidence) / 2`` over all the looks
together, and the interval kept is the tightest of every look's (repeated confidence bounds). The two ends
spend their error differently: the upper end (a verdict "within budget") by O'Brien-Fleming
(:data:`UPPER_SPENDING`), nearly all at the last look; the lower end ("beyond budget") by Hwang-Shih-DeCani with
``gamma = -2`` (:data:`LOWER_SPENDING`), earlier, so that a hopeless configuration is rejected at the first look.
One look at its planned size is the fixed-size test (``c = 1.96`` at 95%) for either. The seeded simulation of
:mod:`poptune.evaluate.decisions` checks both the error at the budget and the power.

Metrics that are not bounded (bits per byte, lower is better: the drop is then configuration minus full model)
keep the seeded percentile bootstrap (:func:`scipy.stats.bootstrap`, stratified by task): an approximate
interval for one look, labelled ``bootstrap`` in :attr:`PairedDrop.method`; it never decides a budget.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from poptune.errors import ConfigError
from poptune.evaluate.groupseq import OBRIEN_FLEMING, hwang_shih_decani
from poptune.interval import Interval

__all__ = ["PairedDrop", "paired_drop", "SEQUENTIAL", "BETTING", "BOOTSTRAP", "IDENTICAL", "UPPER_SPENDING",
           "LOWER_SPENDING", "bound_of_counts", "el_moments", "restricted_rates"]

#: The spending function of the interval's upper end (a verdict "within budget"): O'Brien-Fleming type, which keeps
#: almost all the error for the last look, so a race run to its cap has nearly a one-look test's power.
UPPER_SPENDING = OBRIEN_FLEMING
#: ... of its lower end (a verdict "beyond budget"): Hwang-Shih-DeCani with gamma = -2, which spends the
#: rejection's error earlier (10% of it by a quarter of the items, against under 0.1% for O'Brien-Fleming), so a
#: hopeless configuration is rejected at the first look, at the price of a last boundary of 2.03 instead of 1.97.
LOWER_SPENDING = hwang_shih_decani(-2)

#: Resamples of the bootstrap: the interval's ends move by well under 0.1 point between seeds at this count.
N_RESAMPLES = 2000

#: :attr:`PairedDrop.method` of the score test's repeated bounds over a planned group-sequential design.
SEQUENTIAL = "score-sequential"
#: ... of the betting confidence sequence that drops were stored with before (read only).
BETTING = "betting-cs"
#: ... of the approximate percentile bootstrap (unbounded metrics; drops stored before the betting sequence).
BOOTSTRAP = "bootstrap"
#: ... of the full model against itself: the same model, so the drop is 0 exactly, not estimated.
IDENTICAL = "identical"


@dataclass(frozen=True)
class PairedDrop:
    """A drop with its 95% interval, in the metric's points (x100 for a fraction), and the items behind it.

    Attributes:
        interval: The drop and its interval (:class:`~poptune.interval.Interval`): the point is the mean over tasks
            of the mean per-item difference (positive: worse than the full model), the ends are the interval's (see
            ``method``), the level its two-sided confidence. :attr:`mean`, :attr:`lo`, :attr:`hi` and
            :attr:`confidence` read it; the stored record keeps the fields ``mean``, ``lo``, ``hi`` and
            ``confidence``.
        items: Items per task.
        flipped: Items whose outcome differs between the two sides, per task.
        method: How the interval was made: :data:`SEQUENTIAL` (valid over the planned looks together),
            :data:`BOOTSTRAP` (approximate, one look) or :data:`IDENTICAL`; older records also
            :data:`BETTING`. Drops stored before this field read as bootstrap.
        losses: Items the configuration got worse than the full model, per task.
        looks: Items per task at each look taken, the last being these items.
        planned: Items in all that the design planned for its last look.
        moved: The sum of the items' absolute differences, per task: ``flipped`` for an outcome of 0 or 1, less for
            a continuous one (a likelihood judge's probabilities). Empty in drops stored before it.
        squares: The sum of the items' squared differences, per task: ``flipped`` for an outcome of 0 or 1, less
            again for a continuous one; the score test's variance rests on it (:meth:`flip_mass`). Empty in drops
            stored before it (``moved``, else ``flipped``, stands in: never less).
    """

    interval: Interval
    items: dict[str, int]
    flipped: dict[str, int]
    method: str = BOOTSTRAP
    losses: dict[str, int] = field(default_factory=dict)
    looks: tuple[dict[str, int], ...] = ()
    planned: int = 0
    moved: dict[str, float] = field(default_factory=dict)
    squares: dict[str, float] = field(default_factory=dict)

    @property
    def total(self) -> int:
        """Items in all (every task)."""
        return sum(self.items.values())

    @property
    def stopped_early(self) -> bool:
        """Whether the race stopped before its planned items: the mean is then read at a data-dependent stop
        (biased toward the decision that stopped it), and only the bounds are claims."""
        return bool(self.planned) and self.total < self.planned

    @property
    def flip_rate(self) -> float:
        """The share of items whose outcome changed, all tasks together."""
        return sum(self.flipped.values()) / max(self.total, 1)

    @property
    def flip_mass(self) -> float:
        """How much the items' outcomes moved in all, every task: the sum of the squared differences
        (:attr:`squares`), which is the number of flipped items for outcomes of 0 or 1. What the score test's
        variance -- and so a verdict's cost -- rests on (:func:`el_moments`): a continuous outcome whose every
        item moves a little costs what its few equivalent flips cost, never what a flip on every item would.
        Drops stored before the figure give their absolute differences' sum, else their flips (never less)."""
        for kept in (self.squares, self.moved):
            if kept:
                return sum(kept.values())
        return float(sum(self.flipped.values()))

    @property
    def mean(self) -> float:
        """The drop: the mean over tasks of the mean per-item difference, in points."""
        return self.interval.point

    @property
    def lo(self) -> float:
        return self.interval.lo

    @property
    def hi(self) -> float:
        return self.interval.hi

    @property
    def confidence(self) -> float:
        """The interval's two-sided confidence."""
        return self.interval.level

    @property
    def half_width(self) -> float:
        return (self.hi - self.lo) / 2

    def within(self, budget: float) -> bool:
        """Within ``budget`` at the interval's own level (:attr:`confidence`, two-sided: a certification's is 97.5%
        or more): the interval's upper end is at most the budget."""
        return self.hi <= budget

    def beyond(self, budget: float) -> bool:
        """Beyond ``budget`` at the interval's own level (:attr:`confidence`): its lower end exceeds the budget."""
        return self.lo > budget

    def to_dict(self) -> dict[str, Any]:
        return {"mean": self.mean, "lo": self.lo, "hi": self.hi, "items": dict(self.items),
                "flipped": dict(self.flipped), "method": self.method, "confidence": self.confidence,
                "losses": dict(self.losses), "looks": [dict(look) for look in self.looks], "planned": self.planned,
                "moved": dict(self.moved), "squares": dict(self.squares)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "PairedDrop":
        return cls(Interval(float(data["mean"]), float(data["lo"]), float(data["hi"]),
                            float(data.get("confidence", 0.95))),
                   items={k: int(v) for k, v in data["items"].items()},
                   flipped={k: int(v) for k, v in data.get("flipped", {}).items()},
                   method=str(data.get("method", BOOTSTRAP)),
                   losses={k: int(v) for k, v in data.get("losses", {}).items()},
                   looks=tuple({k: int(v) for k, v in look.items()} for look in data.get("looks", ())),
                   planned=int(data.get("planned", 0)),
                   moved={k: float(v) for k, v in data.get("moved", {}).items()},
                   squares={k: float(v) for k, v in data.get("squares", {}).items()})

    @classmethod
    def identical(cls, items: Mapping[str, int]) -> "PairedDrop":
        """The full model against itself: 0 exactly (the same model on the same items, not a sample)."""
        zeros = {t: 0 for t in items}
        return cls(Interval(0.0, 0.0, 0.0), dict(items), dict(zeros), IDENTICAL, dict(zeros))

    def __str__(self) -> str:
        return f"{self.mean:+.2f} [{self.lo:+.2f}, {self.hi:+.2f}]"


def paired_drop(
    full: Mapping[str, Sequence[float]],
    other: Mapping[str, Sequence[float]],
    *,
    lower_is_better: Sequence[str] = (),
    scale: float = 100.0,
    seed: int = 0,
    confidence: float = 0.95,
    looks: Sequence[Mapping[str, int]] | None = None,
    planned: int | None = None,
) -> PairedDrop:
    """The paired drop of ``other`` against ``full`` over the same items of each task (module docstring).

    Args:
        full: Per task, the full model's per-item outcomes (1/0 correct, F1 in [0, 1], bits per byte, ...),
            in the order they were scored.
        other: Per task, the configuration's outcomes on the same items, in the same order.
        lower_is_better: Tasks whose metric is better when lower (the drop is then ``other - full``); a suite
            with any such task gets the bootstrap interval.
        scale: Multiplies every difference (100: fractions become points).
        seed: Seed of the bootstrap's resampling (the score interval is deterministic).
        confidence: Two-sided coverage of the interval, over all the looks together.
        looks: Items per task at each look taken so far, fixed before any outcome was seen (a race's rounds);
            the last must be these items. Default: this one look.
        planned: Items in all (every task) at the design's last planned look (default: these items).

    Example: 32 items, none changed: ``paired_drop({"t": [1.0] * 32}, {"t": [1.0] * 32})`` is ``+0.00 [-13.34,
    +13.34]``; the exact binomial bound for one look is 10.9 points, the score bound without its continuity
    correction 10.7.

    Raises:
        ConfigError: Tasks or item counts differ between the sides, a task has no items, or the looks do not
            end at these items.
    """
    import numpy as np

    if set(full) != set(other) or not full:
        raise ConfigError(f"paired outcomes need the same tasks on both sides, got {sorted(full)} and {sorted(other)}")
    if not 0 < confidence < 1:
        raise ConfigError(f"`confidence` must be in (0, 1), got {confidence}")
    diffs: dict[str, Any] = {}
    flipped, losses, moved, squares = {}, {}, {}, {}
    for task in full:
        a = np.asarray(full[task], dtype=np.float64)
        b = np.asarray(other[task], dtype=np.float64)
        if a.shape != b.shape or a.ndim != 1 or a.size == 0:
            raise ConfigError(f"task {task!r}: paired outcomes need the same items on both sides, "
                              f"got {a.size} and {b.size}")
        d = (b - a) if task in lower_is_better else (a - b)
        diffs[task] = d
        flipped[task] = int(np.count_nonzero(np.abs(d) > 1e-12))
        losses[task] = int(np.count_nonzero(d > 1e-12))
        moved[task] = round(float(np.abs(d).sum()), 6)
        squares[task] = round(float(np.square(d).sum()), 6)
    mean = scale * float(np.mean([d.mean() for d in diffs.values()]))
    items = {task: len(d) for task, d in diffs.items()}
    total = sum(items.values())
    bounded = not lower_is_better and all(np.all(np.abs(d) <= 1 + 1e-12) for d in diffs.values())
    if bounded:
        seen = tuple(dict(look) for look in looks) if looks is not None else (dict(items),)
        plan = int(planned) if planned is not None else total
        if not seen or seen[-1] != items or plan < 1 or any(
                set(look) != set(items) or any(look[t] > items[t] for t in items) for look in seen):
            raise ConfigError(f"the looks {list(seen)} must end at the items scored ({items}) and never exceed "
                              "them, with a planned size >= 1")
        lo, hi = _sequential(diffs, seen, plan, (1 - confidence) / 2)
        return PairedDrop(Interval(mean, scale * lo, scale * hi, confidence), items, flipped, SEQUENTIAL, losses,
                          seen, plan, moved, squares)
    lo, hi = _bootstrap([scale * d for d in diffs.values()], mean, confidence, seed)
    return PairedDrop(Interval(mean, lo, hi, confidence), items, flipped, BOOTSTRAP, losses, moved=moved,
                      squares=squares)


def restricted_rates(gains: float, losses: float, n: float, drop: float) -> tuple[float, float]:
    """The loss and gain probabilities ``(p, q)`` fitted to the counts under ``p - q = drop`` (Tango 1998).

    The restricted maximum-likelihood estimate from ``losses`` and ``gains`` out of ``n`` items (fractional counts
    allowed); ``drop`` is clipped to [-1, 1].
    """
    if drop < 0:
        q, p = restricted_rates(losses, gains, n, -drop)
        return p, q
    drop = min(drop, 1.0)
    same = max(n - gains - losses, 0.0)
    b = losses * (1 - drop) + gains * (1 - 3 * drop) - 2 * same * drop
    c = gains * drop * (1 - drop)
    q = (b + math.sqrt(max(b * b + 8 * n * c, 0.0))) / (4 * n)
    q = min(max(q, 0.0), (1 - drop) / 2)
    return q + drop, q


def restricted_variance(gains: float, losses: float, n: float, drop: float) -> float:
    """The variance of one paired difference under ``true drop = drop``, fitted to the counts (Tango 1998).

    The restricted maximum-likelihood estimate of the loss and gain probabilities ``p, q`` given ``p - q =
    drop`` from ``losses`` and ``gains`` out of ``n`` items (fractional counts allowed, :func:`restricted_rates`),
    then ``p + q - drop^2``. No flip at all still gives ``|drop| (1 - |drop|)``: rare losses could carry the drop.
    """
    p, q = restricted_rates(gains, losses, n, drop)
    return max(p + q - (p - q) ** 2, 0.0)


def _third_moment(p: float, q: float) -> float:
    """The third central moment of one difference that is +1 with probability ``p``, -1 with ``q``, else 0."""
    mu = p - q
    return p * (1 - mu) ** 3 - q * (1 + mu) ** 3 - (1 - p - q) * mu ** 3


def _bound(diffs: list[Any], critical: float, upper: bool) -> float:
    """The score test's bound at one look: the candidate mean ``m`` where ``|mean - m| = critical * se(m)``.

    ``critical`` is raised by the Cornish-Fisher term ``g (c^2 - 1) / 6`` where the mean's skewness ``g`` under
    ``m`` (same fit) makes the rejected tail heavier than the normal one (rare losses: a long upper tail), never
    lowered. A task whose differences are all -1, 0 or 1 is fitted by its counts (Tango's restricted
    likelihood, :func:`restricted_rates`); one with any other difference by the empirical likelihood over its
    differences and the scale's two ends (:func:`el_moments`), which is the same fit for 0/1 outcomes."""
    import numpy as np

    if math.isinf(critical):
        return 1.0 if upper else -1.0
    tasks: list[tuple[Any, Any, int, float]] = []
    for d in diffs:
        n, mean = int(d.size), float(d.mean())
        if np.all((np.abs(d) < 1e-12) | (np.abs(np.abs(d) - 1) < 1e-12)):
            tasks.append((float(d[d < 0].sum() * -1), float(d[d > 0].sum()), n, mean))
        else:
            values, counts = np.unique(d, return_counts=True)
            tasks.append((tuple(values.tolist()), tuple(counts.tolist()), n, mean))
    return bound_of_counts(tuple(tasks), float(critical), upper)


def el_moments(values: Any, counts: Any, drop: float) -> tuple[float, float]:
    """The variance and third central moment of one paired difference under ``true drop = drop``: the empirical
    likelihood's fit (Owen, *Empirical Likelihood*, 2001) over the observed differences ``values`` (each seen
    ``counts`` times) and the scale's two ends, -1 and 1, which may take mass though never seen.

    Tango's restricted likelihood (:func:`restricted_rates`) is this fit for differences of -1, 0 and 1; for a
    continuous outcome (a likelihood judge's probability, an F1 score) the variance rests on how far the items
    moved (their squares), where the counts' fit would take every move for part of a flip (their absolute
    values). The ends keep what keeps Tango's interval honest: a drop the items seen cannot reach by reweighting
    is reached by mass at 1 (or -1), so no movement at all still gives ``|drop| (1 - |drop|)``. The fit's weights
    are ``1 / (n (1 + l (d - drop)))`` with ``sum w (d - drop) = 0``; where that has no root with every weight and
    the end's positive, ``l`` stops at the end's bound and the end takes the rest of the mass.
    """
    import numpy as np
    from scipy.optimize import brentq

    if abs(drop) >= 1 - 1e-12:
        return 0.0, 0.0
    v, c = np.asarray(values, dtype=np.float64), np.asarray(counts, dtype=np.float64)
    x, n = v - drop, float(c.sum())

    def g(lam: float) -> float:  # decreasing in lam; its root makes the weights' mean the drop
        return float(np.sum(c * x / (1 + lam * x)))

    low, high = -1 / (1 - drop), 1 / (1 + drop)  # where the end 1, or -1, would take mass
    top, bottom = bool(np.any(v >= 1 - 1e-12)), bool(np.any(v <= -1 + 1e-12))
    if not top and g(low) <= 0:
        lam = low
    elif not bottom and g(high) >= 0:
        lam = high
    else:
        span = (high - low) * 1e-13
        lam = float(brentq(g, low + span, high - span, xtol=1e-15, rtol=1e-13))
    w = c / (n * (1 + lam * x))
    rest = max(1.0 - float(w.sum()), 0.0)
    end = 1 - drop if lam == low else -1 - drop  # the end that takes the rest (none: rest is 0)
    variance = float(np.sum(w * x * x)) + rest * end * end
    third = float(np.sum(w * x ** 3)) + rest * end ** 3
    return max(variance, 0.0), third


@lru_cache(maxsize=4096)
def bound_of_counts(counts: tuple[tuple[Any, Any, int, float], ...], critical: float, upper: bool) -> float:
    """The score test's bound at one look (:func:`_bound`) from each task's (gains, losses, items, mean difference)
    or (values, their counts, items, mean difference); cached, since a race's earlier looks recur."""
    centre = sum(m for *_, m in counts) / len(counts)
    sign = 1.0 if upper else -1.0
    correction = 1 / (2 * sum(n for _, _, n, _ in counts))  # half the lattice step of a mean of +-1, 0 items
    tasks = len(counts)

    from scipy.optimize import brentq

    def moments(task: tuple[Any, Any, int, float], drop: float) -> tuple[float, float]:
        first, second, n, _ = task
        if isinstance(first, tuple):  # a continuous outcome: its values and their counts
            return el_moments(first, second, drop)
        p, q = restricted_rates(first, second, n, drop)
        return max(p + q - (p - q) ** 2, 0.0), _third_moment(p, q)

    def margin(m: float) -> float:  # positive where candidate m is rejected on this side (continuous in m)
        shift = m - centre
        var = third = 0.0
        for task in counts:
            n, mu = task[2], task[3]
            v, t = moments(task, min(max(mu + shift, -1.0), 1.0))
            var += v / n / tasks ** 2
            third += t / n ** 2 / tasks ** 3
        skew = -sign * third / var ** 1.5 if var > 0 else 0.0  # of the tail this side rejects in (+: heavier)
        c = critical + max(skew, 0.0) * (critical * critical - 1) / 6
        return sign * shift - correction - c * math.sqrt(var)

    if margin(sign) <= 0:  # not even the end of the scale is rejected
        return sign
    return float(brentq(margin, centre, sign, xtol=1e-13, rtol=1e-12))  # margin(centre) < 0: the correction


def _sequential(diffs: Mapping[str, Any], looks: tuple[dict[str, int], ...], planned: int,
                alpha: float) -> tuple[float, float]:
    """Repeated bounds of the mean of the tasks' mean differences: the tightest over the looks so far."""
    from poptune.evaluate.groupseq import boundaries

    fractions = [sum(look.values()) / planned for look in looks]
    uppers = boundaries(fractions, alpha, UPPER_SPENDING)
    lowers = boundaries(fractions, alpha, LOWER_SPENDING)
    lo, hi = -1.0, 1.0
    for look, c_lo, c_hi in zip(looks, lowers, uppers):
        part = [diffs[t][: look[t]] for t in diffs if look[t]]
        lo, hi = max(lo, _bound(part, c_lo, upper=False)), min(hi, _bound(part, c_hi, upper=True))
    return lo, max(hi, lo)


def _bootstrap(diffs: list[Any], mean: float, confidence: float, seed: int) -> tuple[float, float]:
    """Seeded stratified percentile bootstrap of the mean of the tasks' means (approximate, one look)."""
    import numpy as np
    from scipy import stats

    if all(np.ptp(d) == 0 for d in diffs):  # no spread: every resample gives this value
        return mean, mean

    def statistic(*samples: Any, axis: int = -1) -> Any:
        return np.mean([np.mean(s, axis=axis) for s in samples], axis=0)

    result = stats.bootstrap(tuple(diffs), statistic, n_resamples=N_RESAMPLES, confidence_level=confidence,
                             method="percentile", vectorized=True, rng=np.random.default_rng(seed))
    lo, hi = float(result.confidence_interval.low), float(result.confidence_interval.high)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ConfigError(f"the drop's interval is not finite ({lo}, {hi})")
    return min(lo, mean), max(hi, mean)
