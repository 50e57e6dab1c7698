"""Racing: rounds grow until the paired drop's interval is decided, on a fake scorer."""

import pytest

from poptune import ConfigError
from poptune.evaluate.racing import RacingPolicy, race
from poptune.evaluate.suite import TaskRun
from poptune.evaluate.workload import Workload, rounds


def _workload(n=256):
    return Workload(order={"passkey": list(range(n))}, tokens={"passkey": [100 + i for i in range(n)]})


def _scorer(outcome, calls):
    def score(items):
        calls.append(sum(len(v) for v in items.values()))
        outs = {t: [outcome(i) for i in idx] for t, idx in items.items()}
        return TaskRun({t: {"acc": sum(v) / len(v)} for t, v in outs.items()}, dict(items), outs)

    return score


def _full(workload):
    def full(counts):
        items = {t: workload.order[t][:n] for t, n in counts.items()}
        outs = {t: [1.0] * len(v) for t, v in items.items()}
        return TaskRun({t: {"acc": 1.0} for t in items}, items, outs)

    return full


def test_rounds():
    assert rounds(32, 128) == [32, 64, 128]
    assert rounds(32, 100) == [32, 64, 100]
    assert rounds(50, 20) == [20]
    with pytest.raises(ConfigError):
        rounds(0, 10)


def test_racing_stops_after_the_first_round_when_every_outcome_flips():
    calls = []
    w = _workload()
    result = race(w, RacingPolicy(start=16, cap=128), score=_scorer(lambda i: 0.0, calls), full=_full(w), max_drop=1.0)
    # The rejection's error is spent early (Hwang-Shih-DeCani, gamma -2): a total loss is rejected at the first
    # look (16 of 128 items), where O'Brien-Fleming spending, still the acceptance's, waited for the second.
    assert result.stopped == "beyond budget" and result.rounds == 1 and calls == [16]
    assert result.drop.mean == 100.0 and 1.0 < result.drop.lo < 100.0 and result.run.counts == {"passkey": 16}
    assert result.drop.looks == ({"passkey": 16},) and result.drop.planned == 128


def test_racing_stops_when_the_drop_is_inside_the_budget():
    calls = []
    w = _workload()
    w = _workload(512)
    # No item flips: the upper bound falls below 2 points between 256 and 512 items (a fixed look: about 240).
    result = race(w, RacingPolicy(start=64, cap=512), score=_scorer(lambda i: 1.0, calls), full=_full(w), max_drop=2.0)
    assert result.stopped == "within budget" and calls == [64, 64, 128, 256] and result.drop.hi <= 2.0


def test_a_borderline_configuration_gets_every_item_up_to_the_cap():
    calls = []
    w = _workload()
    # one item in 50 flips: a 2-point drop against a 2-point budget stays undecided
    result = race(w, RacingPolicy(start=16, cap=128), score=_scorer(lambda i: 0.0 if i % 50 == 7 else 1.0, calls),
                  full=_full(w), max_drop=2.0)
    assert result.stopped == "cap" and calls == [16, 16, 32, 64] and result.run.counts == {"passkey": 128}
    assert result.run.items["passkey"] == list(range(128))  # the fixed order, each item once


@pytest.mark.parametrize("futility", [False, True])
def test_a_race_resized_after_its_first_round_is_the_race_planned_at_that_cap(futility):
    """``resize`` sets the cap and the futility stop from the first round's seconds before its look: the race is
    then, outcome for outcome, the one planned so from the start (whose error the seeded simulations measure)."""
    w = _workload(512)
    outcome = lambda i: 0.0 if i % 50 == 7 else 1.0  # noqa: E731  # borderline: undecided at the cap
    asked = []

    def resize(seconds, items):
        asked.append((items, seconds >= 0))
        return 200, futility

    resized = race(w, RacingPolicy(start=16, cap=64), score=_scorer(outcome, calls := []), full=_full(w),
                   max_drop=2.0, futility=not futility, resize=resize)
    planned = race(w, RacingPolicy(start=16, cap=200), score=_scorer(outcome, again := []), full=_full(w),
                   max_drop=2.0, futility=futility)
    assert asked == [(16, True)] and calls == again
    assert calls == ([16, 16, 32] if futility else [16, 16, 32, 64, 72])  # with the stop: futile at 64 items
    assert resized.drop.to_dict() == planned.drop.to_dict() and resized.drop.planned == 200
    assert (resized.stopped, resized.rounds) == (planned.stopped, planned.rounds)
    # a cap below the first round keeps the round: the race ends at its only look
    short = race(w, RacingPolicy(start=16, cap=64), score=_scorer(outcome, few := []), full=_full(w), max_drop=2.0,
                 resize=lambda seconds, items: (4, False))
    assert few == [16] and short.stopped == "cap" and short.drop.planned == 16


def test_without_a_budget_racing_stops_once_the_interval_is_narrow():
    calls = []
    w = _workload()
    result = race(w, RacingPolicy(start=16, cap=128, target_halfwidth=50.0),
                  score=_scorer(lambda i: float(i % 2), calls), full=_full(w), max_drop=None)
    assert result.stopped == "narrow enough" and result.rounds == 2


def test_a_budget_on_bits_per_byte_alone_is_refused_before_any_item_is_scored():
    calls = []
    w = Workload(order={"longctx_squad_bpb": list(range(64))}, tokens={"longctx_squad_bpb": [100] * 64})
    with pytest.raises(ConfigError, match="bounded metric"):
        race(w, RacingPolicy(start=16, cap=64), score=_scorer(lambda i: 1.0, calls), full=_full(w), max_drop=2.0)
    assert calls == []


def test_races_run_together_are_each_the_race_run_alone():
    # Three configurations: a total loss (rejected at the first look), one that flips every tenth item (rejected
    # at the second) and one that loses nothing (within the budget at 256 items). Together, each stops where it
    # stops alone, outcome for outcome, and a finished race is not scored again; the rounds are told who races.
    from poptune.evaluate.racing import race_together

    w, policy = _workload(512), RacingPolicy(start=64, cap=512)
    outcomes = [lambda i: 0.0, lambda i: float(i % 10 != 0), lambda i: 1.0]
    alone = [race(w, policy, score=_scorer(f, []), full=_full(w), max_drop=2.0) for f in outcomes]
    calls: list[list[int]] = [[], [], []]
    told: list[list[int]] = []
    together = race_together(w, policy, scores=[_scorer(f, c) for f, c in zip(outcomes, calls)], full=_full(w),
                             max_drop=2.0, racing=told.append)
    assert [(r.stopped, r.rounds) for r in together] == [("beyond budget", 1), ("beyond budget", 2),
                                                         ("within budget", 4)]
    for a, b in zip(alone, together):
        assert (a.stopped, a.rounds, a.run.outcomes, a.drop.to_dict()) == (b.stopped, b.rounds, b.run.outcomes,
                                                                             b.drop.to_dict())
    assert calls == [[64], [64, 64], [64, 64, 128, 256]]
    assert told == [[0, 1, 2], [1, 2], [2], [2]]


def test_only_a_lone_race_is_resized():
    from poptune.evaluate.racing import race_together

    w = _workload()
    with pytest.raises(ConfigError, match="race one configuration"):
        race_together(w, RacingPolicy(), scores=[_scorer(lambda i: 1.0, [])] * 2, full=_full(w), max_drop=2.0,
                      resize=lambda seconds, items: (128, True))
