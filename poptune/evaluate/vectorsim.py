"""Error rows at their level: the certification's verdicts on many seeded races at once, vectorised with NumPy.

:func:`poptune.evaluate.decisions.race_error` drives the real race one replicate at a time (a few hundred per row);
a share at a level of 1.25% needs about 100,000 races before its binomial noise is small beside it. Here every
race of a row is decided together: a race's verdict at a look is the score test of :mod:`poptune.evaluate.paired`
inverted at the budget itself -- "within" when the upper bound is at most the budget, that is when the candidate
drop ``m = budget`` is rejected on the upper side (its margin at ``m`` is >= 0), "beyond" when it is rejected on
the lower side -- with the same fits (Tango's restricted rates for 0/1 differences, the empirical likelihood over
the differences and the scale's ends otherwise), the same continuity correction and Cornish-Fisher term, and the
group-sequential boundaries of the race's planned looks (:func:`poptune.evaluate.groupseq.boundaries`). The race
stops at its first decided look, as :func:`poptune.evaluate.racing.race` does; the futility stop is left off (it is
non-binding, so it can only lower either error). ``tests/evaluate/test_vectorsim.py`` checks the verdicts against
:func:`poptune.evaluate.paired.paired_drop` race by race.

Outcomes are paired differences on a grid of values in [-1, 1] (:class:`GridScenario`): 0/1 outcomes (differences
-1, 0, 1) or fractional ones on a 0.05 grid (F1-type flips of 0.2 to 1 and small moves of every other item), whose
mean is the true drop exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["BEYOND", "FUTILE", "GridScenario", "RowResult", "UNDECIDED", "WITHIN", "binomial_check", "decide",
           "vector_races"]


@dataclass(frozen=True)
class GridScenario:
    """Paired differences on a grid: ``values`` (fractions in [-1, 1]) drawn with ``probabilities``.

    Attributes:
        label: What the row says of its outcomes.
        values: The differences an item can take.
        probabilities: Their probabilities (summing to 1).
    """

    label: str
    values: tuple[float, ...]
    probabilities: tuple[float, ...]

    @property
    def drop(self) -> float:
        """The true drop: the differences' mean."""
        return sum(v * p for v, p in zip(self.values, self.probabilities))

    def draw(self, rng: Any, shape: tuple[int, ...]) -> Any:
        """Items drawn from the scenario: indices into :attr:`values` (int16) of the given shape."""
        import numpy as np

        p = np.asarray(self.probabilities)
        return rng.choice(len(self.values), size=shape, p=p / p.sum()).astype(np.int16)

    @classmethod
    def binary(cls, drop: float, flip_rate: float) -> "GridScenario":
        """0/1 outcomes: an item flips with ``flip_rate``, a loss (+1) or a gain (-1), the mean ``drop``."""
        loss, gain = (flip_rate + drop) / 2, (flip_rate - drop) / 2
        return cls(f"0/1, {100 * flip_rate:g}% flips", (-1.0, 0.0, 1.0), (gain, 1 - flip_rate, loss))

    @classmethod
    def fractional(cls, drop: float, flip_rate: float, sd: float) -> "GridScenario":
        """F1-type outcomes on a 0.05 grid: a flip moves an item by 0.2 to 1 (uniform, mean 0.6), a loss with
        probability ``(flip_rate + drop / 0.6) / 2``; every other item moves by a normal amount of ``sd`` rounded to
        the grid and clipped at 3 sd (symmetric, mean 0): the mean is ``drop``."""
        from statistics import NormalDist

        sizes = [round(0.2 + 0.05 * i, 2) for i in range(17)]
        loss, gain = (flip_rate + drop / 0.6) / 2, (flip_rate - drop / 0.6) / 2
        steps = int(round(3 * sd / 0.05))
        weights = [NormalDist(0, sd).cdf(0.05 * (k + 0.5)) - NormalDist(0, sd).cdf(0.05 * (k - 0.5))
                   for k in range(-steps, steps + 1)] if sd else [1.0]
        still = {round(0.05 * k, 2): w / sum(weights) * (1 - flip_rate)
                 for k, w in zip(range(-steps, steps + 1), weights)}
        table: dict[float, float] = {}
        for v, p in [*((s, loss / 17) for s in sizes), *((-s, gain / 17) for s in sizes), *still.items()]:
            table[v] = table.get(v, 0.0) + p
        values = tuple(sorted(table))
        return cls(f"F1-type, {100 * flip_rate:g}% flips, others moving by sd {100 * sd:g} points",
                   values, tuple(table[v] for v in values))


@dataclass(frozen=True)
class RowResult:
    """One row: ``races`` seeded races' verdict shares and the binomial check of the "within" share."""

    races: int
    within: float
    beyond: float
    mean_items: float
    p_value: float

    @property
    def undecided(self) -> float:
        return 1 - self.within - self.beyond


def binomial_check(declared: int, races: int, level: float) -> float:
    """The one-sided binomial p-value of ``declared`` "within" verdicts out of ``races`` if the true error were
    ``level``: ``P(X >= declared)``, X binomial. Below 0.001 the row fails its level."""
    from scipy.stats import binom

    return float(binom.sf(declared - 1, races, level)) if declared else 1.0


def _tango(gains: Any, losses: Any, n: Any, drop: Any) -> tuple[Any, Any]:
    """Variance and third moment of one 0/1 difference under ``drop`` (Tango's restricted rates, vectorised)."""
    import numpy as np

    neg = drop < 0
    g, lo, d = np.where(neg, losses, gains), np.where(neg, gains, losses), np.minimum(np.abs(drop), 1.0)
    same = np.maximum(n - g - lo, 0.0)
    b = lo * (1 - d) + g * (1 - 3 * d) - 2 * same * d
    c = g * d * (1 - d)
    q = np.clip((b + np.sqrt(np.maximum(b * b + 8 * n * c, 0.0))) / (4 * n), 0.0, (1 - d) / 2)
    p = q + d
    p, q = np.where(neg, q, p), np.where(neg, p, q)
    mu = p - q
    third = p * (1 - mu) ** 3 - q * (1 + mu) ** 3 - (1 - p - q) * mu ** 3
    return np.maximum(p + q - mu * mu, 0.0), third


def _el(values: Any, counts: Any, drop: Any) -> tuple[Any, Any]:
    """:func:`poptune.evaluate.paired.el_moments` for many races at once (bisection on the multiplier)."""
    import numpy as np

    x = values[None, :] - drop[:, None]
    n = counts.sum(axis=1)
    seen = counts > 0
    low, high = -1 / (1 - drop), 1 / (1 + drop)

    def g(lam: Any) -> Any:
        den = 1 + lam[:, None] * x
        return np.where(seen, counts * x / np.where(seen, den, 1.0), 0.0).sum(axis=1)

    top = (seen & (values[None, :] >= 1 - 1e-12)).any(axis=1)
    bottom = (seen & (values[None, :] <= -1 + 1e-12)).any(axis=1)
    span = (high - low) * 1e-13
    a, b = low + span, high - span
    for _ in range(60):
        mid = (a + b) / 2
        up = g(mid) > 0
        a, b = np.where(up, mid, a), np.where(up, b, mid)
    lam = (a + b) / 2
    with np.errstate(divide="ignore", invalid="ignore"):  # an end seen makes its own g infinite: not taken then
        at_low = ~top & (g(low) <= 0)
        at_high = ~at_low & ~bottom & (g(high) >= 0)
    lam = np.where(at_low, low, np.where(at_high, high, lam))
    w = np.where(seen, counts / (n[:, None] * np.where(seen, 1 + lam[:, None] * x, 1.0)), 0.0)
    rest = np.maximum(1 - w.sum(axis=1), 0.0)
    end = np.where(at_low, 1 - drop, -1 - drop)
    variance = (w * x * x).sum(axis=1) + rest * end * end
    third = (w * x ** 3).sum(axis=1) + rest * end ** 3
    return np.maximum(variance, 0.0), third


def _margin(counts: list[Any], values: Any, budget: float, critical: float, upper: bool) -> Any:
    """Each race's margin of the candidate drop ``budget`` on one side at one look (positive: rejected there),
    from each task's counts per grid value (races x values): the margin of
    :func:`poptune.evaluate.paired.bound_of_counts`."""
    import numpy as np

    tasks = len(counts)
    binary = len(values) == 3 and np.allclose(values, (-1.0, 0.0, 1.0))
    ns = [c.sum(axis=1).astype(float) for c in counts]
    mus = [(c * values[None, :]).sum(axis=1) / n for c, n in zip(counts, ns)]
    centre = sum(mus) / tasks
    shift = budget - centre
    var = np.zeros_like(centre)
    third = np.zeros_like(centre)
    for c, n, mu in zip(counts, ns, mus):
        drop = np.clip(mu + shift, -1.0, 1.0)
        v, t = _tango(c[:, 0].astype(float), c[:, 2].astype(float), n, drop) if binary else _el(values, c, drop)
        var += v / n / tasks ** 2
        third += t / n ** 2 / tasks ** 3
    sign = 1.0 if upper else -1.0
    skew = np.where(var > 0, -sign * third / np.maximum(var, 1e-300) ** 1.5, 0.0)
    if math.isinf(critical):  # no error spent at this look: nothing is rejected
        return np.full_like(centre, -np.inf)
    crit = critical + np.maximum(skew, 0.0) * (critical * critical - 1) / 6
    correction = 1 / (2 * sum(ns))
    return sign * shift - correction - crit * np.sqrt(var)


def vector_races(scenario: GridScenario, *, cap: int, tasks: int, alpha: float, races: int, seed: int,
                 start: int = 32, budget: float = 2.0, chunk: int = 5000) -> RowResult:
    """``races`` seeded races of ``tasks`` alike tasks on ``scenario``'s differences, rounds from ``start`` items
    per task doubling to ``cap``, each side's error ``alpha`` (one-sided: a certification's attempt 1 spends 1.25%),
    budget in points; the verdict shares and the binomial check of "within" at ``alpha``."""
    import numpy as np

    from poptune.evaluate.workload import rounds

    looks = rounds(start, cap)
    values = np.asarray(scenario.values)
    rng = np.random.default_rng(seed)
    within = beyond = 0
    items = 0.0
    for first in range(0, races, chunk):
        size = min(chunk, races - first)
        verdicts, spent = decide(scenario.draw(rng, (tasks, size, cap)), values, looks, alpha, budget)
        within, beyond = within + int((verdicts == WITHIN).sum()), beyond + int((verdicts == BEYOND).sum())
        items += float(spent.sum())
    return RowResult(races, within / races, beyond / races, items / races, binomial_check(within, races, alpha))


#: :func:`decide`'s verdict codes: how each race stopped.
WITHIN, BEYOND, FUTILE, UNDECIDED = 1, -1, 2, 0


def decide(drawn: Any, values: Any, looks: list[int], alpha: float, budget: float, *,
           futility: bool = False) -> tuple[Any, Any]:
    """Each race's verdict (:data:`WITHIN`, :data:`BEYOND`, :data:`FUTILE`, :data:`UNDECIDED`) and the items it
    scored (all tasks): ``drawn`` holds the races' items as indices into ``values`` (tasks x races x items, at least
    the last look's), ``looks`` the items per task at each planned look, ``alpha`` each side's error, ``budget`` in
    points. A race stops at its first decided look, as :func:`poptune.evaluate.racing.race` does; ``futility``: also
    after a look before the last whose conditional power of "within" by the last is under
    :data:`poptune.evaluate.racing.FUTILITY_POWER` (:func:`poptune.evaluate.racing.conditional_power`, vectorised)."""
    import numpy as np

    from poptune.evaluate.groupseq import boundaries
    from poptune.evaluate.paired import LOWER_SPENDING, UPPER_SPENDING
    from poptune.evaluate.racing import FUTILITY_POWER

    cap, tasks, size = looks[-1], drawn.shape[0], drawn.shape[1]
    fractions = [n / cap for n in looks]
    uppers, lowers = boundaries(fractions, alpha, UPPER_SPENDING), boundaries(fractions, alpha, LOWER_SPENDING)
    verdicts = np.full(size, UNDECIDED, dtype=np.int8)
    spent = np.full(size, cap * tasks, dtype=float)
    open_ = np.ones(size, dtype=bool)
    for number, (look, c_hi, c_lo) in enumerate(zip(looks, uppers, lowers), start=1):
        counts = [np.stack([(d[:, :look] == k).sum(axis=1) for k in range(len(values))], axis=1).astype(float)
                  for d in drawn]
        yes = open_ & (_margin(counts, values, budget / 100, c_hi, True) >= 0)
        no = open_ & ~yes & (_margin(counts, values, budget / 100, c_lo, False) > 0)
        verdicts[yes], verdicts[no] = WITHIN, BEYOND
        stop = yes | no
        if futility and number < len(looks):
            futile = open_ & ~stop & (_conditional_power(counts, values, budget / 100, cap * tasks, uppers[-1])
                                      < FUTILITY_POWER)
            verdicts[futile] = FUTILE
            stop |= futile
        spent[stop] = look * tasks
        open_ &= ~stop
    return verdicts, spent


def _conditional_power(counts: list[Any], values: Any, b: float, planned: int, last: float) -> Any:
    """:func:`poptune.evaluate.racing.conditional_power` for many races at once: the items left assumed to lose
    nothing and to move as :func:`poptune.evaluate.racing.planning_rate` says of those seen."""
    import numpy as np
    from scipy.stats import norm

    seen = sum(c.sum(axis=1) for c in counts)
    total = sum((c * values[None, :]).sum(axis=1) for c in counts)
    squares = sum((c * values[None, :] ** 2).sum(axis=1) for c in counts)
    moved = sum((c * np.abs(values)[None, :]).sum(axis=1) for c in counts)
    size = np.where(moved > 0, squares / np.where(moved > 0, moved, 1.0), 1.0)
    flips = (squares + size * size) / (seen + 2)
    variance, _ = _tango(flips / 2, flips / 2, np.ones_like(flips), np.full_like(flips, b))
    room = planned * b - 0.5 - last * np.sqrt(variance * planned) - total
    return norm.cdf(room / np.sqrt((planned - seen) * flips))


def standard_error(share: float, races: int) -> float:
    """The binomial standard error of a share over ``races``."""
    return math.sqrt(max(share * (1 - share), 0.0) / races)
