"""Every latency measurement that reports a 95% interval takes the pairs that interval needs to reach 95%."""

from dataclasses import fields

from poptune.measure.benchrecord import DEFAULT_POLICY
from poptune.measure.stats import MIN_PAIRS_95, median_interval_coverage
from poptune.problem.presets import PRESETS
from poptune.problem.problem import TuningProblem
from poptune.tune.trust import CONFIRM_PAIRS, CONFIRM_ROUNDS


def test_defaults_take_at_least_the_pairs_of_a_95_percent_interval():
    repeats = next(f.default for f in fields(TuningProblem) if f.name == "repeats")
    assert repeats == DEFAULT_POLICY.min_repeats == MIN_PAIRS_95
    assert median_interval_coverage(repeats) >= 0.95 > median_interval_coverage(repeats - 1)
    assert all(preset.max_pairs >= MIN_PAIRS_95 for preset in PRESETS.values())
    assert CONFIRM_ROUNDS * CONFIRM_PAIRS >= MIN_PAIRS_95 and CONFIRM_PAIRS % 2 == 0
