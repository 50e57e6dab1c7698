"""Null checks: identical-work pairs outside 1 +- 3% and speedups above their ideal mark a run as noisy."""

from poptune.measure import LatencyRecord, PairRecord
from poptune.measure.bench import BenchRow
from poptune.measure.nullcheck import NullCheck, figures


def _pair(ratios: list[float]) -> PairRecord:
    return PairRecord(a=LatencyRecord([10.0] * len(ratios)), b=LatencyRecord([10.0 * r for r in ratios]))


QUIET = [0.99, 1.01, 1.0, 0.995, 1.005, 1.0, 0.998, 1.002]
LOADED = [0.3, 0.35, 0.28, 0.4, 0.31, 0.33, 0.29, 0.36]  # the full model timed against itself at 0.30x


def test_quiet_identical_work_passes():
    check = NullCheck(length=512, aa=figures(_pair(QUIET)), decode={512: figures(_pair(QUIET))})
    assert not check.noisy and check.reasons == []
    assert NullCheck.from_dict(check.to_dict()) == check


def test_aa_pair_outside_tolerance_is_flagged():
    check = NullCheck(length=512, aa=figures(_pair(LOADED)))
    assert check.noisy and check.reasons[0].startswith("A/A prefill at 512 measured")
    assert check.to_dict()["noisy"] is True


def test_decode_pair_outside_tolerance_is_flagged():
    check = NullCheck(length=512, aa=figures(_pair(QUIET)), decode={512: figures(_pair([2.2, 2.3, 2.1, 2.25]))})
    assert check.noisy and "decode POP/full at 512" in check.reasons[0]


def test_a_wide_interval_around_one_is_not_flagged_but_a_narrow_one_just_off_is():
    wide = [0.5, 1.5, 0.8, 1.2, 1.0, 0.7, 1.3]
    assert not NullCheck(length=16, aa=figures(_pair(wide))).noisy
    assert NullCheck(length=16, aa=figures(_pair([1.05, 1.06, 1.05, 1.055, 1.06, 1.05]))).noisy


def test_speedup_above_ideal_beyond_its_interval_is_flagged():
    row = BenchRow(length=512, prefill=_pair([6.4, 6.5, 6.6, 6.53, 6.55]), ideal=1.42)
    assert row.above_ideal and row.summary()["above_ideal"] is True
    plausible = BenchRow(length=512, prefill=_pair([1.3, 1.45, 1.5, 1.38]), ideal=1.42)
    assert not plausible.above_ideal  # its interval reaches below the ideal
    check = NullCheck(length=512, aa=None, above_ideal=[512])
    assert check.noisy and "above its FLOPs ideal" in check.reasons[0]


def test_fewer_than_three_pairs_are_not_judged():
    assert not NullCheck(length=16, aa=figures(_pair([0.3, 0.31]))).noisy
    assert not BenchRow(length=16, prefill=_pair([6.5, 6.6]), ideal=1.42).above_ideal
