"""Null checks: A/A pairs not shown within 1 +- 5%, decode pairs outside 1 +- 3% and speedups above their ideal
mark a run as noisy."""

from poptune.measure import LatencyRecord, PairRecord
from poptune.measure.bench import BenchRow
from poptune.measure.nullcheck import AA_PAIRS, NullCheck, aa_figures, figures


def _pair(ratios: list[float]) -> PairRecord:
    return PairRecord(a=LatencyRecord([10.0] * len(ratios)), b=LatencyRecord([10.0 * r for r in ratios]))


QUIET = [0.99, 1.01, 1.0, 0.995, 1.005, 1.0, 0.998, 1.002]
LOADED = [0.3, 0.35, 0.28, 0.4, 0.31, 0.33, 0.29, 0.36]  # the full model timed against itself at 0.30x


def test_quiet_identical_work_passes():
    check = NullCheck(length=512, aa=aa_figures(_pair(QUIET * 2)), decode={512: figures(_pair(QUIET))})
    assert not check.noisy and check.reasons == []
    assert check.aa["equivalent"] is True and check.aa["pairs"] == AA_PAIRS
    assert NullCheck.from_dict(check.to_dict()) == check


def test_aa_pair_outside_tolerance_is_flagged():
    check = NullCheck(length=512, aa=aa_figures(_pair(LOADED)))
    assert check.noisy and check.reasons[0].startswith("A/A prefill at 512 measured")
    assert "not shown within 1 +- 5% ([0.952, 1.050])" in check.reasons[0]
    assert check.to_dict()["noisy"] is True
    old = NullCheck(length=512, aa=figures(_pair(LOADED)))  # a record made before the equivalence test
    assert old.noisy and "outside 1 +- 3%" in old.reasons[0]


def test_aa_equivalence_must_be_shown_not_merely_not_refuted():
    # A wide interval around 1 refutes nothing, and shows nothing: the A/A test flags it (its old rule did not).
    wide = [0.5, 1.5, 0.8, 1.2, 1.0, 0.7, 1.3] * 2 + [1.0, 1.0]
    assert NullCheck(length=16, aa=aa_figures(_pair(wide))).noisy
    # 16 pairs within +-3% around 1 show it; around 1.04, the interval reaches past 1.05: not shown.
    near = [1 + 0.03 * (i / 7.5 - 1) for i in range(16)]
    assert not NullCheck(length=16, aa=aa_figures(_pair(near))).noisy
    assert NullCheck(length=16, aa=aa_figures(_pair([r + 0.04 for r in near]))).noisy
    # The 90% interval of 16 pairs is [x_(5), x_(12)]: three pairs far off on each side do not move it.
    spiky = sorted(near)[3:13] + [0.5, 0.6, 0.7, 1.4, 1.5, 1.6]
    fig = aa_figures(_pair(spiky))
    assert fig["equivalent"] and fig["coverage"] >= 0.9 and fig["confidence"] == 0.9
    assert not aa_figures(_pair([1.0] * 4))["equivalent"]  # four pairs cannot reach 90%: never shown


def test_decode_pair_outside_tolerance_is_flagged():
    check = NullCheck(length=512, aa=figures(_pair(QUIET)), decode={512: figures(_pair([2.2, 2.3, 2.1, 2.25]))})
    assert check.noisy and "decode POP/full at 512" in check.reasons[0]


def test_a_wide_decode_or_old_aa_interval_around_one_is_not_flagged_but_a_narrow_one_just_off_is():
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
