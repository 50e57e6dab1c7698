"""Paired drops: the interval on hand-made samples, its sign conventions and its refusals."""


import pytest

from poptune import ConfigError
from poptune.evaluate.paired import BOOTSTRAP, IDENTICAL, SEQUENTIAL, PairedDrop, paired_drop, restricted_variance


def test_interval_on_a_hand_made_paired_sample():
    full = [1.0] * 60 + [0.0] * 40
    pop = list(full)
    for i in range(0, 60, 6):  # ten correct items, spread over the order, become wrong: a 10-point drop
        pop[i] = 0.0
    drop = paired_drop({"t": full}, {"t": pop}, seed=0)
    assert drop.mean == pytest.approx(10.0) and drop.method == SEQUENTIAL
    assert drop.items == {"t": 100} and drop.flipped == {"t": 10} and drop.losses == {"t": 10}
    # One look: the continuity-corrected score interval is about as wide as the exact Clopper-Pearson interval
    # of 10 losses in 100 items, [4.90, 17.62] (Clopper and Pearson 1934; R's binom.test(10, 100)); rare losses
    # make the mean's upper tail long, and the Cornish-Fisher term widens the lower end for it (5.02 without).
    assert 4.3 < drop.lo < 4.9 and 17.0 < drop.hi < 18.5
    assert drop.looks == ({"t": 100},) and drop.planned == 100 and not drop.stopped_early
    assert paired_drop({"t": full}, {"t": pop}, seed=0) == drop  # deterministic
    assert drop.within(drop.hi) and not drop.within(drop.hi - 0.01)
    assert drop.beyond(drop.lo - 0.01) and not drop.beyond(drop.lo)


def test_no_flipped_item_never_collapses_the_interval():
    # No item changed in 32: the exact 97.5% bound on the flip rate at one look is 1 - 0.025 ** (1 / 32) = 10.9
    # points; the score test with the variance taken under the candidate drop never says less, never [0, 0].
    same = paired_drop({"t": [1.0, 0.0] * 16}, {"t": [1.0, 0.0] * 16})
    assert same.mean == 0.0 and same.flipped == {"t": 0}
    assert same.hi >= 100 * (1 - 0.025 ** (1 / 32)) > 10.88 and same.lo <= -10.88
    # ... and it narrows as items accumulate: below the 2-point budget after about 240 unchanged items (the
    # exact one-look bound needs 183).
    assert paired_drop({"t": [1.0] * 240}, {"t": [1.0] * 240}).hi < 2.0 < paired_drop({"t": [1.0] * 200},
                                                                                       {"t": [1.0] * 200}).hi


def test_the_restricted_variance_keeps_rare_losses_possible():
    # Tango's restricted estimate under drop = 2%: no flip seen still leaves the variance of 2% losses ...
    assert restricted_variance(0, 0, 100, 0.02) == pytest.approx(0.02 * 0.98)
    # ... balanced flips under drop 0 give the flip rate, and the sign of the drop mirrors gains and losses.
    assert restricted_variance(5, 5, 100, 0.0) == pytest.approx(0.10)
    assert restricted_variance(3, 7, 100, -0.02) == pytest.approx(restricted_variance(7, 3, 100, 0.02))


def test_more_looks_on_the_same_items_cost_width_and_early_stops_are_marked():
    full, pop = {"t": [1.0] * 200}, {"t": [0.0 if i % 10 == 0 else 1.0 for i in range(200)]}  # 10% losses, spread
    one = paired_drop(full, pop)
    staged = paired_drop(full, pop, looks=[{"t": 50}, {"t": 100}, {"t": 200}], planned=200)
    assert staged.hi >= one.hi - 1e-9 and staged.lo <= one.lo + 1e-9  # spending over three looks is never tighter
    assert staged.hi - one.hi < 0.5  # ... but O'Brien-Fleming spending keeps the last look nearly a fixed test's
    early = paired_drop(full, pop, looks=[{"t": 50}, {"t": 100}, {"t": 200}], planned=800)
    assert early.stopped_early and early.hi > staged.hi
    with pytest.raises(ConfigError, match="looks"):
        paired_drop(full, pop, looks=[{"t": 100}], planned=200)


def test_losses_only_leave_the_upper_end_open():
    full = [1.0] * 64
    pop = [0.0 if i % 16 == 0 else 1.0 for i in range(64)]  # four losses, no gain
    drop = paired_drop({"t": full}, {"t": pop})
    assert drop.mean == pytest.approx(6.25) and drop.hi > 6.25 + 9  # not closed at the observed losses
    assert drop.lo < 6.25


def test_the_full_model_against_itself_is_exactly_zero():
    drop = PairedDrop.identical({"a": 32, "b": 32})
    assert (drop.mean, drop.lo, drop.hi, drop.method) == (0.0, 0.0, 0.0, IDENTICAL)


def test_tasks_share_one_sequence_and_are_averaged():
    full = {"a": [1.0] * 40, "b": [1.0] * 40}
    pop = {"a": [0.0] * 40, "b": [1.0] * 40}  # task a loses 100 points, task b nothing: mean over tasks 50
    drop = paired_drop(full, pop)
    assert drop.mean == pytest.approx(50.0) and drop.lo < 50.0 < drop.hi
    assert drop.items == {"a": 40, "b": 40}
    unequal = paired_drop({"a": [1.0] * 40, "b": [1.0] * 10}, {"a": [0.0] * 40, "b": [1.0] * 10})
    assert unequal.mean == pytest.approx(50.0) and unequal.lo < 50.0 < unequal.hi  # one method, any counts


def test_lower_is_better_metrics_count_an_increase_as_a_drop():
    drop = paired_drop({"bpb": [1.0, 1.2, 0.9]}, {"bpb": [1.1, 1.3, 1.0]}, lower_is_better=["bpb"], scale=1.0)
    assert drop.mean == pytest.approx(0.1) and drop.method == BOOTSTRAP  # unbounded: the approximate bootstrap


def test_round_trip_and_refusals():
    drop = paired_drop({"t": [1.0, 0.0, 1.0, 1.0]}, {"t": [0.0, 0.0, 1.0, 1.0]})
    assert PairedDrop.from_dict(drop.to_dict()) == drop
    with pytest.raises(ConfigError, match="same items"):
        paired_drop({"t": [1.0, 0.0]}, {"t": [1.0]})
    with pytest.raises(ConfigError, match="same tasks"):
        paired_drop({"t": [1.0]}, {"u": [1.0]})


def test_a_continuous_outcomes_cost_rests_on_how_much_it_moved_not_how_many_items_moved():
    from poptune.evaluate.racing import verdict_cost

    full = {"t": [0.60] * 200}
    slight = paired_drop(full, {"t": [0.59, 0.61] * 100})  # every item moves, by a hundredth
    assert slight.flipped == {"t": 200} and slight.moved == {"t": pytest.approx(2.0)}
    assert slight.squares == {"t": pytest.approx(0.02)} and slight.flip_mass == pytest.approx(0.02)  # squares
    binary = paired_drop({"t": [1.0] * 200}, {"t": [0.0, 1.0] * 100})
    assert binary.flip_mass == binary.flipped["t"] == 100  # 0/1 outcomes: the mass is the count of flips
    few = verdict_cost(slight, 2.0, planned=256, start=32)
    assert few.flip_rate == pytest.approx((0.02 + 0.01 ** 2) / 202)  # one more move of the size seen
    assert few.per_task < verdict_cost(binary, 2.0, planned=256, start=32).per_task
    again = PairedDrop.from_dict(slight.to_dict())
    assert again == slight and again.flip_mass == pytest.approx(0.02)
    older = {k: v for k, v in slight.to_dict().items() if k != "squares"}  # stored before the squares: |d|
    assert PairedDrop.from_dict(older).flip_mass == pytest.approx(2.0)
    assert verdict_cost(PairedDrop.from_dict(older), 2.0, planned=256, start=32).flip_rate == pytest.approx(3 / 202)
    old = {k: v for k, v in older.items() if k != "moved"}  # stored before either figure: its flips
    assert PairedDrop.from_dict(old).flip_mass == 200


def test_the_empirical_likelihood_fit_is_tangos_for_0_1_outcomes():
    from poptune.evaluate.paired import _third_moment, el_moments, restricted_rates

    for gains, losses, n in [(3, 7, 100), (0, 0, 100), (5, 0, 50), (0, 4, 40), (10, 10, 64), (2, 3, 5)]:
        seen = [(v, c) for v, c in ((-1.0, gains), (0.0, n - gains - losses), (1.0, losses)) if c]
        for drop in (-0.3, -0.05, 0.0, 0.02, 0.1, 0.5, 0.9):
            p, q = restricted_rates(gains, losses, n, drop)
            variance, third = el_moments([v for v, _ in seen], [c for _, c in seen], drop)
            assert variance == pytest.approx(p + q - (p - q) ** 2, abs=1e-9)
            assert third == pytest.approx(_third_moment(p, q), abs=1e-9)


def _counted(full: list[float], other: list[float], critical: float = 1.96) -> float:
    """The upper bound as the counts' fit gives it, each move taken for part of a flip (before el_moments)."""
    import numpy as np

    from poptune.evaluate.paired import bound_of_counts

    d = np.asarray(full) - np.asarray(other)
    return 100 * bound_of_counts(((float(-d[d < 0].sum()), float(d[d > 0].sum()), d.size, float(d.mean())),), critical,
                           True)


def test_a_continuous_outcome_that_moves_a_little_is_bounded_by_its_squares_and_rare_losses_stay_possible():
    import numpy as np

    rng = np.random.default_rng(0)
    full = rng.uniform(0.3, 0.7, 400).tolist()
    other = (np.asarray(full) - rng.normal(0.0, 0.05, 400)).tolist()  # every item moves, by 5 points or so
    drop = paired_drop({"t": full}, {"t": other})
    assert drop.hi - drop.mean < 1.7  # 1.96 * 5 / sqrt(400) = 0.49, and about 1.96^2 / 400 for rare losses
    assert drop.hi - drop.mean < 0.6 * (_counted(full, other) - drop.mean)  # moves as parts of flips: wider
    still = paired_drop({"t": full}, {"t": list(full)})  # nothing moved: no evidence against rare losses
    binary = paired_drop({"t": [1.0] * 400}, {"t": [1.0] * 400})
    assert still.hi == pytest.approx(binary.hi) and still.hi > 0.9
    rare = list(other)
    rare[:8] = [0.0] * 8  # 2% of items lose all of their score: the spread, and the interval, grow
    lost = paired_drop({"t": full}, {"t": rare})
    assert lost.hi - lost.mean > drop.hi - drop.mean and lost.hi > drop.hi + 1.0
