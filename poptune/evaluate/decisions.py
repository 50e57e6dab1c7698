"""How often a decision rule is wrong: seeded simulations of racing and certification on paired outcomes.

A statistical verdict is a claim about an error rate, so the rates are measured, not assumed: these functions
drive the real :func:`poptune.evaluate.racing.race` with simulated paired outcomes of known true drop and flip
rate, and count the verdicts. The tests (``tests/evaluate/test_decisions.py``) run them in seconds with a bound
that can fail; ``benchmarks/decision_errors.py`` runs them with more replicates for
``leaderboards/decision-errors-simulated-cpu-intel-xeon-processor-2t.md``.

Simulated items: each item's full-model outcome and the configuration's are 1/0; an item flips with probability
``flip_rate``, a flip is a loss (full right, configuration wrong) with probability ``(flip_rate + drop) / (2
flip_rate)`` and a gain otherwise, so the true drop is ``drop`` exactly; ``losses_only`` makes every flip a loss
(``flip_rate = drop``). Tasks are independent and alike. ``partial`` items are F1-type (a flip moves a score in
[0, 1] by a share of it); ``noise`` makes the outcome continuous, as a likelihood judge's is: every item that does
not flip moves by a normal amount of that standard deviation (clipped at 3 of them), around 0, or around the drop
when no item flips (every item then carries it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from poptune.errors import ConfigError

__all__ = ["Scenario", "ErrorRates", "race_error", "PARTIAL_MEAN", "OFF_GRID_CAPS"]

#: The mean size of a flip of an F1-type item (uniform on [0.2, 1]).
PARTIAL_MEAN = 0.6

#: Caps per task that a plan may choose from data and the clock, off the doubling grid of 32 items per task:
#: each is checked at the budget (``benchmarks/decision_errors.py``; the tests check smaller ones).
OFF_GRID_CAPS = (100, 200, 300, 642, 1000, 1250)


@dataclass(frozen=True)
class Scenario:
    """A configuration's true paired behaviour, per item (fractions, not points).

    Attributes:
        drop: The true drop (``P(loss) - P(gain)``).
        flip_rate: The share of items whose outcome differs from the full model's.
        losses_only: Every flip is a loss (then ``flip_rate`` must equal ``drop``, or ``drop / PARTIAL_MEAN``
            for F1-type items).
        partial: F1-type items: scores in [0, 1], a flip moves one by a share of it (module docstring).
        noise: A continuous outcome: the standard deviation of every other item's move (module docstring).
    """

    drop: float
    flip_rate: float
    losses_only: bool = False
    partial: bool = False
    noise: float = 0.0

    def __post_init__(self) -> None:
        size = PARTIAL_MEAN if self.partial else 1.0
        if not 0 <= self.noise <= 0.1 or (self.noise and not self.partial):
            raise ConfigError(f"a scenario's noise is for F1-type items, at most 0.1, got {self.noise}")
        drifts = self.noise > 0 and self.flip_rate == 0 and abs(self.drop) <= 0.1
        if not (drifts or 0 <= abs(self.drop) <= self.flip_rate * size + 1e-12) or self.flip_rate > 1:
            raise ConfigError(f"a scenario needs |drop| <= flip_rate <= 1, got {self.drop} and {self.flip_rate}")
        if self.losses_only and abs(self.flip_rate * size - self.drop) > 1e-12:
            raise ConfigError(f"losses only: flip_rate must equal drop, got {self.flip_rate} and {self.drop}")

    @property
    def label(self) -> str:
        flips = "losses only" if self.losses_only else f"{100 * self.flip_rate:g}% flips"
        moves = f", every other item moving by sd {100 * self.noise:g} points" if self.noise else ""
        return f"drop {100 * self.drop:g} points, {flips}" + (", F1-type" if self.partial else "") + moves

    def draw(self, rng: Any, n: int) -> tuple[list[float], list[float]]:
        """``n`` paired items: (full model's outcomes, configuration's)."""
        import numpy as np

        size = PARTIAL_MEAN if self.partial else 1.0
        carried = self.drop if self.flip_rate else 0.0  # by the flips; with none, by every item's move
        u = rng.random(n)
        loss = u < (self.flip_rate + carried / size) / 2
        gain = ~loss & (u < self.flip_rate)
        if self.partial:
            moved = rng.uniform(0.2, 1.0, n)
            base = rng.random(n)
            full = base.copy()
            full[loss] = moved[loss] + (1 - moved[loss]) * base[loss]
            other = full.copy()
            other[loss] = full[loss] - moved[loss]
            other[gain] = moved[gain] + (1 - moved[gain]) * base[gain]
            full[gain] = other[gain] - moved[gain]
            if self.noise:
                still = ~(loss | gain)
                centre = self.drop if self.flip_rate == 0 else 0.0
                full[still] = 0.4 + 0.2 * base[still]  # room for a move of 0.1 + 3 sd of at most 0.1 either way
                other[still] = full[still] - centre - np.clip(rng.normal(0.0, self.noise, n), -3 * self.noise,
                                                              3 * self.noise)[still]
            return full.tolist(), other.tolist()
        full = (rng.random(n) < 0.5).astype(float)
        full[loss], full[gain] = 1.0, 0.0
        other = full.copy()
        other[loss], other[gain] = 0.0, 1.0
        return full.tolist(), other.tolist()


@dataclass(frozen=True)
class ErrorRates:
    """Verdict shares over replicates, with the standard error of each (binomial).

    ``undecided``: races that reached the cap; ``futile``: races stopped for futility (``futility=True``)."""

    scenario: Scenario
    replicates: int
    within: float
    beyond: float
    undecided: float
    mean_items: float
    futile: float = 0.0

    def standard_error(self, share: float) -> float:
        return (share * (1 - share) / self.replicates) ** 0.5


def race_error(
    scenario: Scenario,
    *,
    start: int,
    cap: int,
    max_drop: float = 2.0,
    tasks: int = 2,
    replicates: int = 300,
    growth: float = 2.0,
    confidence: float = 0.95,
    seed: int = 0,
    futility: bool = False,
) -> ErrorRates:
    """The verdicts of :func:`~poptune.evaluate.racing.race` (``start`` to ``cap`` items per task, ``tasks`` tasks)
    on a configuration behaving as ``scenario``, over ``replicates`` seeded races; ``max_drop`` in points;
    ``futility``: the race's opt-in futility stop. The same ``seed`` draws the same items whatever the design."""
    import numpy as np

    from poptune.evaluate.racing import RacingPolicy, race
    from poptune.evaluate.suite import LOWER_IS_BETTER, PRIMARY_METRIC
    from poptune.evaluate.workload import Workload

    names = sorted(t for t, m in PRIMARY_METRIC.items() if m not in LOWER_IS_BETTER)[:tasks]  # any accuracy tasks
    workload = Workload({t: list(range(cap)) for t in names}, {t: [0] * cap for t in names})
    policy = RacingPolicy(start=start, cap=cap, growth=growth)
    rng = np.random.default_rng(seed)
    counts = {"within budget": 0, "beyond budget": 0, "futile": 0}
    items = 0
    for _ in range(replicates):
        drawn = {t: scenario.draw(rng, cap) for t in names}

        def full(wanted: dict[str, int], drawn: dict[str, Any] = drawn) -> Any:
            return _run({t: drawn[t][0][: wanted[t]] for t in names})

        def score(new: dict[str, list[int]], drawn: dict[str, Any] = drawn) -> Any:
            return _run({t: [drawn[t][1][i] for i in new[t]] for t in new}, {t: new[t] for t in new})

        result = race(workload, policy, score=score, full=full, max_drop=max_drop, confidence=confidence,
                      futility=futility)
        counts[result.stopped] = counts.get(result.stopped, 0) + 1
        items += sum(result.drop.items.values())
    within, beyond = counts["within budget"] / replicates, counts["beyond budget"] / replicates
    futile = counts["futile"] / replicates
    return ErrorRates(scenario, replicates, within, beyond, 1 - within - beyond - futile, items / replicates, futile)


def _run(outcomes: dict[str, list[float]], indices: dict[str, list[int]] | None = None) -> Any:
    from poptune.evaluate.suite import TaskRun

    items = indices or {t: list(range(len(v))) for t, v in outcomes.items()}
    return TaskRun({t: {"acc": sum(v) / len(v)} for t, v in outcomes.items() if v}, items, outcomes)

