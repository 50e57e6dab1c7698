"""The vectorised races decide as the real score test does, race by race, and their binomial check can fail."""

from __future__ import annotations

import numpy as np
import pytest

from poptune.evaluate.paired import paired_drop
from poptune.evaluate.vectorsim import GridScenario, binomial_check, vector_races
from poptune.evaluate.workload import rounds


def _real(scenario: GridScenario, races: int, seed: int, cap: int, tasks: int, alpha: float) -> tuple[int, int]:
    """The same races decided by :func:`paired_drop` over the planned looks (the first decided look stops one)."""
    rng = np.random.default_rng(seed)
    values = np.asarray(scenario.values)
    drawn = rng.choice(len(values), size=(tasks, races, cap), p=np.asarray(scenario.probabilities))
    looks = rounds(32, cap)
    within = beyond = 0
    for r in range(races):
        d = {f"t{t}": values[drawn[t, r]] for t in range(tasks)}
        for i, look in enumerate(looks):
            part = {t: v[:look] for t, v in d.items()}
            drop = paired_drop({t: 0.5 + v / 2 for t, v in part.items()}, {t: 0.5 - v / 2 for t, v in part.items()},
                               confidence=1 - 2 * alpha, looks=[{t: n for t in d} for n in looks[: i + 1]],
                               planned=cap * tasks)
            if drop.hi <= 2.0 or drop.lo > 2.0:
                within, beyond = within + (drop.hi <= 2.0), beyond + (drop.lo > 2.0)
                break
    return within, beyond


@pytest.mark.parametrize("scenario, tasks", [(GridScenario.binary(0.0, 0.04), 2), (GridScenario.binary(0.02, 0.1), 1),
                                             (GridScenario.fractional(0.0, 0.05, 0.05), 1)])
def test_the_vectorised_verdicts_are_the_score_tests(scenario, tasks):
    races, cap = 40, 128
    mine = vector_races(scenario, cap=cap, tasks=tasks, alpha=0.0125, races=races, seed=7, chunk=races)
    within, beyond = _real(scenario, races, 7, cap, tasks, 0.0125)
    assert (round(mine.within * races), round(mine.beyond * races)) == (within, beyond)
    assert 0 < mine.within or scenario.drop > 0  # the power rows do decide: the comparison is not vacuous


def test_a_scenarios_mean_is_its_drop_and_the_check_can_fail():
    for scenario in (GridScenario.binary(0.02, 0.1), GridScenario.fractional(0.02, 0.1, 0.05)):
        assert sum(scenario.probabilities) == pytest.approx(1.0) and scenario.drop == pytest.approx(0.02)
    assert binomial_check(1250, 100_000, 0.0125) > 0.4 and binomial_check(1500, 100_000, 0.0125) < 0.001
