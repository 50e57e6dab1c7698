"""Stored drops re-decided from their per-item outcomes by the current interval, without measuring again."""

from poptune import PopConfig
from poptune.evaluate.paired import IDENTICAL, SEQUENTIAL
from poptune.store.measurement import Measurement
from poptune.store.redecide import redecide

FULL_RUN = {"scores": {"piqa": {"acc_norm": 1.0}}, "items": {"piqa": list(range(40))},
            "outcomes": {"piqa": [1.0] * 40}}


def _measurement(config, outcomes, drop):
    row = {"pop_ms": 9.0, "full_ms": 10.0, "speedup": 1.1, "ideal": 1.2, "pairs": 6}
    return Measurement(config=config, latency={16: row}, target_length=16, accuracy={"piqa": sum(outcomes) / 32},
                       full_accuracy={"piqa": 1.0}, items={"piqa": len(outcomes)}, outcomes={"piqa": outcomes},
                       drop=drop)


def test_a_stored_bootstrap_drop_is_recomputed_from_its_outcomes():
    outcomes = [1.0] * 32  # no item flipped: the old bootstrap said [0, 0]
    old = {"mean": 0.0, "lo": 0.0, "hi": 0.0, "items": {"piqa": 32}, "flipped": {"piqa": 0}}
    new = redecide(_measurement(PopConfig(skip=2), outcomes, old), FULL_RUN)
    assert new.drop["method"] == SEQUENTIAL and new.drop["mean"] == 0.0
    assert new.drop["hi"] > 10.88 and new.drop["lo"] < -10.88  # the items it has cannot rule out a 10-point drop
    assert new.outcomes == {"piqa": outcomes} and new.speedup == 1.1  # nothing else changes


def test_the_full_model_stays_exactly_zero_and_trials_without_outcomes_are_kept():
    full = redecide(_measurement(PopConfig(skip=0), [1.0] * 32, {"mean": 0.0, "lo": 0.0, "hi": 0.0,
                                                                  "items": {"piqa": 32}}), FULL_RUN)
    assert (full.drop["lo"], full.drop["hi"], full.drop["method"]) == (0.0, 0.0, IDENTICAL)
    old = _measurement(PopConfig(skip=2), [], {"mean": 1.0, "lo": 0.0, "hi": 2.0, "items": {"piqa": 32}})
    assert redecide(old, FULL_RUN) is old and redecide(old, None) is old
