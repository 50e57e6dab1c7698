"""Decision rules checked by seeded simulation: the error they claim is the error they make, and they decide
when the answer is clear (issues 32, 45 and 56)."""

import numpy as np
import pytest

from poptune import ConfigError
from poptune.evaluate.decisions import PARTIAL_MEAN, Scenario, race_error
from poptune.evaluate.paired import SEQUENTIAL, PairedDrop, paired_drop
from poptune.evaluate.racing import verdict_cost
from poptune.interval import Interval

REPLICATES = 600

AT_BUDGET = [Scenario(0.02, 0.05), Scenario(0.02, 0.10), Scenario(0.02, 0.20), Scenario(0.02, 0.02, losses_only=True),
             Scenario(0.02, 0.10, partial=True), Scenario(0.02, 0.02 / PARTIAL_MEAN, losses_only=True, partial=True)]


def test_within_budget_is_declared_at_most_2_5_percent_of_the_time_when_the_drop_equals_the_budget():
    # The racing of a study: two tasks, 16 -> 32 -> 64 items per task, a look after every round. Issue 58: the
    # former check (2.5% + 3 standard errors at 600 races, i.e. 4.4%) could not catch a real breach; each row is
    # now a one-sided binomial test and the six rows together (3,600 races) one more, which fails from 113
    # verdicts (3.1%) of either kind.
    within = beyond = 0
    for scenario in AT_BUDGET:
        rates = race_error(scenario, start=16, cap=64, max_drop=2.0, replicates=REPLICATES, seed=1)
        w, b = round(rates.within * REPLICATES), round(rates.beyond * REPLICATES)
        assert not _breach(w, REPLICATES) and not _breach(b, REPLICATES), (scenario.label, rates)
        within, beyond = within + w, beyond + b
    pooled = REPLICATES * len(AT_BUDGET)
    assert not _breach(within, pooled, 0.01) and not _breach(beyond, pooled, 0.01), (within, beyond)


def test_a_longer_race_at_the_budget_keeps_its_error_too():
    # The standard certification's scale: 32 -> 128 items per task over three looks.
    rates = race_error(Scenario(0.02, 0.10), start=32, cap=128, replicates=REPLICATES, seed=2)
    assert not _breach(round(rates.within * REPLICATES), REPLICATES), rates
    assert not _breach(round(rates.beyond * REPLICATES), REPLICATES), rates


def test_a_configuration_that_loses_nothing_is_certified_by_2500_items_at_10_percent_flips():
    # The power a planned design owes: a one-look test needs about 1,960 items for 80% here; the betting
    # confidence sequence this replaced certified 16% of such races at 1,024 items and needed about 8,200.
    rates = race_error(Scenario(0.0, 0.10), start=32, cap=1250, replicates=300, seed=3)
    assert rates.within >= 0.80, rates  # observed 0.89 (standard error 0.02)
    assert rates.beyond == 0.0 and rates.mean_items < 2500


@pytest.mark.parametrize("flips", [0.10, 0.20])
def test_the_items_a_verdict_is_said_to_need_give_the_power_promised(flips):
    # What an undecided row prints: the items per task a race needs for 80% power at the observed flip rate.
    # Sized from a search race of 200 items per task, then run to that cap: it decides about 80% of the time.
    seen = PairedDrop(Interval(0.0, -3.0, 3.0), {"a": 200, "b": 200},
                      {"a": round(200 * flips), "b": round(200 * flips)}, SEQUENTIAL)
    cost = verdict_cost(seen, 2.0, planned=128, start=32)
    rates = race_error(Scenario(0.0, flips), start=32, cap=cost.per_task, replicates=800, seed=4)
    assert 0.80 - 3 * rates.standard_error(0.8) <= rates.within <= 0.92, (cost, rates)


@pytest.mark.parametrize("cap", [256, 372])
def test_the_chance_said_of_the_items_a_clock_buys_is_the_races_power(cap):
    # A plan the clock cuts short says what its items are worth: the chance they certify the budget at true drop 0
    # (the last look's score test). The race's earlier looks add a few points, so it is a slight underestimate.
    seen = PairedDrop(Interval(0.0, -3.0, 3.0), {"a": 32, "b": 32}, {"a": 2, "b": 0}, SEQUENTIAL)  # 3/66 planned
    cost = verdict_cost(seen, 2.0, planned=cap, start=32, confidence=0.975)
    assert cost.per_task > cap  # the clock bought less than 80% needs
    rates = race_error(Scenario(0.0, cost.flip_rate), start=32, cap=cap, confidence=0.975, replicates=400, seed=9)
    assert rates.within - 0.08 <= cost.chance <= rates.within + 3 * rates.standard_error(cost.chance), (cost, rates)
    assert cost.chance < 0.8


@pytest.mark.parametrize("cap", [232, 388])
def test_a_continuous_outcomes_chance_is_the_races_power(cap):
    # A long-prompt likelihood study's certification: one task, every item moving a little (4.9 points root mean
    # square, as its searches saw), 1.25% one-sided, futility on. Its plan once said 14% at the 232 items the clock
    # bought and 80% at 388, where races certify 3% and 96% of the time: the test's variance grows as the mean
    # falls below the budget (the fit carries the budget by mass at the scale's end), so it is taken there.
    scenario = Scenario(0.0, 0.0, partial=True, noise=0.049)
    full, other = scenario.draw(np.random.default_rng(41), 400)
    cost = verdict_cost(paired_drop({"t": full}, {"t": other}), 2.0, planned=cap, start=32, confidence=0.975)
    rates = race_error(scenario, start=32, cap=cap, tasks=1, confidence=0.975, replicates=300, seed=43,
                       futility=True)
    assert abs(cost.chance - rates.within) <= 0.03 + 3 * rates.standard_error(rates.within), (cost, rates)


def test_a_continuous_outcomes_size_gives_the_power_promised():
    # Two tasks, every item moving by 5 points: sized from 200 items per task, then raced to that cap (the size at
    # the mean's 0 gave 164 items per task, 13% more, certifying 96% of the time where 80% was promised).
    scenario = Scenario(0.0, 0.0, partial=True, noise=0.05)
    draws = [scenario.draw(np.random.default_rng(29 + k), 200) for k in range(2)]
    seen = paired_drop({t: d[0] for t, d in zip("ab", draws)}, {t: d[1] for t, d in zip("ab", draws)})
    cost = verdict_cost(seen, 2.0, planned=128, start=32)
    rates = race_error(scenario, start=32, cap=cost.per_task, replicates=300, seed=31)
    assert 0.80 - 3 * rates.standard_error(0.8) <= rates.within <= 0.9, (cost, rates)


def test_the_chance_of_an_outcome_that_never_moves_is_certain_or_nil():
    # A likelihood judge's moves can be too small to count (a flip rate of 0.0): the statistic is then fixed, and
    # the items either certify the budget or cannot (no division by its spread of 0).
    from poptune.evaluate.racing import _chance

    for continuous in (False, True):
        assert _chance(2.0, 0.0, 512, 2, 32, 2.0, 0.0125, continuous) == 1.0
        assert _chance(2.0, 0.0, 2, 1, 2, 2.0, 0.00625, continuous) == 0.0  # 2 items cannot show 2 points


def test_the_tests_variance_at_the_budget_grows_as_the_items_mean_falls_below_it():
    # Why a plan takes it where the mean must fall to certify: the fit must carry budget - mean, and small moves
    # carry little of it, so for them nearly all sits at the scale's end (about budget - mean + their spread).
    from poptune.evaluate.racing import _test_variance

    for flips, continuous in ((0.045, False), (0.049 ** 2, True)):
        variances = [_test_variance(mean, flips, 0.02, continuous) for mean in (0.0, -0.005, -0.01)]
        assert variances[0] < variances[1] < variances[2], variances
    small = [_test_variance(mean, 0.049 ** 2, 0.02, True) for mean in (0.0, -0.01)]
    assert small[1] - small[0] == pytest.approx(0.01, rel=0.15)  # almost one for one


def test_a_lossless_configuration_is_certified_once_there_are_enough_items():
    # No item flips: the upper bound falls below 2 points after about 240 items (the exact one-look bound: 183).
    assert race_error(Scenario(0.0, 0.0), start=32, cap=128, replicates=20).within == 1.0
    assert race_error(Scenario(0.0, 0.0), start=16, cap=64, replicates=20).within == 0.0  # 128 items are too few


def test_a_broken_configuration_is_rejected_at_the_first_round():
    # "Beyond budget" spends its error early (Hwang-Shih-DeCani, gamma -2): the first look (a quarter of the
    # items) rejects a configuration that loses half its items; O'Brien-Fleming spending waited for the second.
    rates = race_error(Scenario(0.5, 0.5, losses_only=True), start=16, cap=64, replicates=50)
    assert rates.beyond == 1.0 and rates.mean_items == 32


CONTINUOUS_AT_BUDGET = [Scenario(0.02, 0.0, partial=True, noise=0.05), Scenario(0.02, 0.10, partial=True, noise=0.05),
                        Scenario(0.02, 0.02 / PARTIAL_MEAN, losses_only=True, partial=True, noise=0.03)]


def test_a_continuous_outcome_keeps_the_error_at_the_budget():
    # A likelihood judge's outcome (el_moments: the empirical likelihood's variance): every item moves a little,
    # the drop carried by every item, by F1-type flips, or by rare large losses under small moves (the case the
    # scale's ends are in the fit for). The certification's 32 -> 128 items per task; 400 races a row, then pooled.
    # Observed: at most 1.0% of either verdict a row (benchmarks/decision_errors.py --sections continuous: more).
    within = beyond = 0
    for scenario in CONTINUOUS_AT_BUDGET:
        rates = race_error(scenario, start=32, cap=128, replicates=400, seed=5)
        w, b = round(rates.within * 400), round(rates.beyond * 400)
        assert not _breach(w, 400) and not _breach(b, 400), (scenario.label, rates)
        within, beyond = within + w, beyond + b
    assert not _breach(within, 1200, 0.01) and not _breach(beyond, 1200, 0.01), (within, beyond)


def test_a_continuous_outcome_that_loses_nothing_is_certified_with_a_few_hundred_items():
    # Every item moving by about 5 points, none lost on average: 256 items in all decide about two races in three,
    # 512 all (the counts' fit of before, each move part of a flip, planned about 2,000 items for this).
    small = race_error(Scenario(0.0, 0.0, partial=True, noise=0.05), start=32, cap=128, replicates=150, seed=3)
    large = race_error(Scenario(0.0, 0.0, partial=True, noise=0.05), start=32, cap=256, replicates=100, seed=3)
    assert 0.4 <= small.within <= 0.9 and small.beyond == 0.0, small  # observed 0.64 (300 races)
    assert large.within >= 0.95, large  # observed 1.0 (300 races)


def test_scenarios_refuse_impossible_rates():
    with pytest.raises(ConfigError, match="drop"):
        Scenario(0.1, 0.05)
    with pytest.raises(ConfigError, match="losses only"):
        Scenario(0.02, 0.05, losses_only=True)
    with pytest.raises(ConfigError, match="noise"):
        Scenario(0.0, 0.05, noise=0.05)  # continuous moves are for F1-type scores
    with pytest.raises(ConfigError, match="drop"):
        Scenario(0.2, 0.0, partial=True, noise=0.05)  # every item carrying a drop larger than its room


def _breach(count: int, replicates: int, level: float = 0.001) -> bool:
    """Whether ``count`` verdicts in ``replicates`` races reject an error of at most 2.5% (one-sided binomial)."""
    from scipy.stats import binom

    return float(binom.sf(count - 1, replicates, 0.025)) < level


def test_the_error_at_the_budget_holds_at_caps_off_the_doubling_grid():
    # Issue 56: a plan chooses the cap from data and the clock, so the last look falls off the grid of 32, 64, ...:
    # 32 -> 48, 32 -> 64 -> 72 (a last round of 8 items: a look of little new information), 32 -> 64 -> 100,
    # 32 -> 64 -> 128 -> 200. The last look spends what the earlier ones left, given the looks' item counts. Each
    # row and all rows together must not reject "at most 2.5%" by a one-sided binomial test; the larger caps (300
    # to 1,250 per task) are in benchmarks/decision_errors.py.
    rows = [(Scenario(0.02, 0.10), 48), (Scenario(0.02, 0.10), 72), (Scenario(0.02, 0.10), 100),
            (Scenario(0.02, 0.10), 200), (Scenario(0.02, 0.04), 100)]
    replicates, within, beyond = 400, 0, 0
    for scenario, cap in rows:
        rates = race_error(scenario, start=32, cap=cap, replicates=replicates, seed=cap)
        w, b = round(rates.within * replicates), round(rates.beyond * replicates)
        assert not _breach(w, replicates) and not _breach(b, replicates), (cap, rates)
        within, beyond = within + w, beyond + b
    # Observed: 25 and 28 of 2,000. The pooled check fails from 68 (3.4%), a row from 22 of 400 (5.5%); the same
    # races at twice the level (confidence 90%) give 64 and 67, just under: only a gross breach fails here, the
    # benchmark's 2,000 races per row measure finer.
    pooled = replicates * len(rows)
    assert not _breach(within, pooled, 0.01) and not _breach(beyond, pooled, 0.01), (within, beyond)


def _race_of_losses(lost, start, cap, monkeypatch=None):
    """A race of two tasks where the configuration gets item i wrong when ``lost(i)``, the full model every item."""
    from poptune.evaluate.decisions import _run
    from poptune.evaluate.racing import RacingPolicy, race
    from poptune.evaluate.workload import Workload

    names = ["arc_easy", "hellaswag"]
    workload = Workload({t: list(range(cap)) for t in names}, {t: [0] * cap for t in names})
    calls = []

    def score(new):
        calls.append({t: len(v) for t, v in new.items()})
        return _run({t: [0.0 if lost(i) else 1.0 for i in new[t]] for t in new}, {t: new[t] for t in new})

    def full(wanted):
        return _run({t: [1.0] * wanted[t] for t in names})

    return race(workload, RacingPolicy(start=start, cap=cap), score=score, full=full, max_drop=2.0), calls


def test_a_hopeless_configuration_is_rejected_at_the_first_look_and_acceptance_is_unchanged(monkeypatch):
    from poptune.evaluate import paired
    from poptune.evaluate.groupseq import OBRIEN_FLEMING, boundaries

    # A 75-point drop (3 items in 4 lost), two tasks, the search's 8 -> 16 -> 32 items per task: rejected at the
    # first look (8 items per task) now that "beyond budget" spends its error earlier (Hwang-Shih-DeCani, -2) ...
    result, calls = _race_of_losses(lambda i: i % 4 != 0, start=8, cap=32)
    assert result.stopped == "beyond budget" and result.rounds == 1 and result.drop.total == 16
    assert result.drop.mean == pytest.approx(75.0) and result.drop.lo > 2.0
    # ... where O'Brien-Fleming spending on that side too waited for the second look.
    monkeypatch.setattr(paired, "LOWER_SPENDING", OBRIEN_FLEMING)
    before, _ = _race_of_losses(lambda i: i % 4 != 0, start=8, cap=32)
    assert before.stopped == "beyond budget" and before.rounds == 2 and before.drop.total == 32
    # "Within budget" keeps its O'Brien-Fleming boundaries exactly (five equal looks: the textbook values) ...
    assert paired.UPPER_SPENDING == OBRIEN_FLEMING
    assert [round(c, 3) for c in boundaries([0.2, 0.4, 0.6, 0.8, 1.0], 0.025, paired.UPPER_SPENDING)] == \
        [4.877, 3.357, 2.68, 2.29, 2.031]
    # ... and its upper bound: the same whichever function the lower end spends by.
    full, other = {"t": [1.0] * 256}, {"t": [0.0 if i % 20 == 0 else 1.0 for i in range(256)]}
    looks = [{"t": 32}, {"t": 64}, {"t": 128}, {"t": 256}]
    patched = paired.paired_drop(full, other, looks=looks, planned=512)
    monkeypatch.undo()
    now = paired.paired_drop(full, other, looks=looks, planned=512)
    assert now.hi == patched.hi and now.lo != patched.lo
    # A broken configuration in simulation: most races of 75% losses stop at the first look.
    rates = race_error(Scenario(0.75, 0.75, losses_only=True), start=8, cap=32, replicates=100, seed=9)
    assert rates.beyond == 1.0 and rates.mean_items < 20


def test_the_futility_stop_is_opt_in_non_binding_and_gives_up_hopeless_races():
    from poptune.evaluate.paired import paired_drop
    from poptune.evaluate.racing import conditional_power, race

    # Off by default: the same races as before, never "futile".
    assert race.__kwdefaults__["futility"] is False
    plain = race_error(Scenario(0.04, 0.20), start=32, cap=128, replicates=150, seed=10)
    assert plain.futile == 0.0
    # A 4-point drop against a 2-point budget at 20% flips: within is out of reach by 128 items per task, and
    # most races stop for futility after a look or two instead of running to the cap.
    futile = race_error(Scenario(0.04, 0.20), start=32, cap=128, replicates=150, seed=10, futility=True)
    assert futile.futile >= 0.7 and futile.within == 0.0 and futile.mean_items < 0.6 * plain.mean_items
    # Non-binding: the boundaries are the design's, so a race stopped for futility would not have been within;
    # at the budget the same draws give no more "within" verdicts than without the stop.
    at_budget = [race_error(Scenario(0.02, 0.10), start=32, cap=128, replicates=300, seed=11, futility=f)
                 for f in (False, True)]
    assert at_budget[1].within <= at_budget[0].within and at_budget[1].beyond <= at_budget[0].beyond
    assert not _breach(round(at_budget[1].within * 300), 300)
    # The conditional power: a race with nothing lost so far and most items to come can still certify ...
    plan = [{"a": n, "b": n} for n in (32, 64, 128, 256, 512)]
    calm = paired_drop({"a": [1.0] * 32, "b": [1.0] * 32},
                       {"a": [1.0] * 32, "b": [0.0 if i % 16 == 0 else 1.0 for i in range(32)]},
                       looks=plan[:1], planned=1024)
    assert conditional_power(calm, 2.0, plan) > 0.5
    # ... one that has lost 25 points with 128 items per task planned cannot, whatever comes.
    bad = paired_drop({"a": [1.0] * 32, "b": [1.0] * 32},
                      {t: [0.0 if i % 4 == 0 else 1.0 for i in range(32)] for t in "ab"},
                      looks=plan[:1], planned=256)
    assert conditional_power(bad, 2.0, plan[:3]) < 0.01
