"""A certification planned to decide: sized from the search's flips, the clock and the cap, said before it spends."""

from __future__ import annotations

import math
import time
import types

import pytest

from poptune.engine import PopConfig
from poptune.evaluate.paired import SEQUENTIAL, PairedDrop
from poptune.interval import Interval
from poptune.problem.problem import TuningProblem
from poptune.tune.certify import CLOSING_S, plan_certification


def _setup(flipped: int, seconds: float | None, supply: int = 1024):
    drop = PairedDrop(Interval(0.0, -5.0, 5.0), {"passkey": 32, "kv_recall": 32}, {"passkey": flipped, "kv_recall": 0},
                      SEQUENTIAL)
    study = types.SimpleNamespace(trials=[types.SimpleNamespace(user_attrs={"drop": drop.to_dict()})])
    problem = TuningProblem(model="tiny-llama", certify_limit=supply)
    evaluator = types.SimpleNamespace(problem=problem, seconds_per_item=lambda: seconds)
    row = types.SimpleNamespace(trial=0, label="5/window-64/0", config=PopConfig(skip=5, boundary="window-64"))
    return study, evaluator, [row]


def test_the_plan_buys_what_a_verdict_needs_and_says_so():
    study, evaluator, rows = _setup(flipped=1, seconds=0.1)
    plan = plan_certification(study, evaluator, rows, 0.975, deadline=time.monotonic() + 3600)
    assert plan.per_task == plan.needed and 100 < plan.needed < 1024
    line = plan.line("5/window-64/0", 2.0)
    assert line.startswith(f"certifying 5/window-64/0 on {2 * plan.per_task:,} fresh items (~")
    # what the 80% assumes is said (issue 58): a true drop of 0, and items flipping as often as the search's did
    assert line.endswith("80% power for a 2-point verdict if the true drop is 0 and items flip at the 3.0% flip rate "
                         "the search saw (the search's few items understate the selected candidate's flips: simulated "
                         "studies certify 42-87% of such candidates)")  # what whole studies simulated show (issue 86)


def test_a_likelihood_plan_is_sized_on_the_squared_moves_and_says_their_root_mean_square():
    from poptune.evaluate.paired import paired_drop

    full = {"passkey:likelihood": [0.9] * 32}
    drop = paired_drop(full, {"passkey:likelihood": [0.85, 0.95] * 16})  # every item moves by 5 points
    problem = TuningProblem(model="tiny-llama", tasks=("passkey:likelihood",), certify_limit=1024)
    study = types.SimpleNamespace(trials=[types.SimpleNamespace(user_attrs={"drop": drop.to_dict()})])
    evaluator = types.SimpleNamespace(problem=problem, seconds_per_item=lambda: 0.1)
    rows = [types.SimpleNamespace(trial=0, label="6/last/0", config=PopConfig(skip=6))]
    plan = plan_certification(study, evaluator, rows, 0.975, deadline=time.monotonic() + 3600)
    assert plan.flip_rate == pytest.approx((32 * 0.05 ** 2 + 0.05 ** 2) / 34)  # one more move of the size seen
    assert plan.line("6/last/0", 2.0, "likelihood").endswith(
        "80% power for a 2-point likelihood verdict if the true drop is 0 and items move by 4.9 points (root mean "
        "square) as the search saw")
    before = {k: v for k, v in drop.to_dict().items() if k != "squares"}  # as the absolute moves planned it
    study.trials[0].user_attrs["drop"] = before
    old = plan_certification(study, evaluator, rows, 0.975, deadline=time.monotonic() + 3600)
    assert plan.needed < 500 and 4 * plan.needed < old.needed  # 387 against 1,946
    # its line names the figure it rests on: a mean of absolute moves (one flip added) is no root mean square
    assert "items move by 7.6 points on average as the search saw" in old.line("6/last/0", 2.0, "likelihood")


def test_a_short_clock_buys_fewer_items_and_the_line_says_what_they_certify():
    study, evaluator, rows = _setup(flipped=1, seconds=1.0)
    plan = plan_certification(study, evaluator, rows, 0.975, deadline=time.monotonic() + CLOSING_S + 200)
    assert plan.per_task == plan.affordable < plan.needed and 90 <= plan.affordable <= 100
    assert "all the time budget buys" in plan.line("x", 2.0) and plan.smallest_budget > 2.0
    # and what those items are worth: the chance they certify the budget itself, below the plan's 80%
    assert 0.05 < plan.chance < 0.8 and f"2 points {100 * plan.chance:.0f}% of the time; " in plan.line("x", 2.0)
    # and how much longer a clock buys the verdict's items, at the cost per item measured (1 s here)
    longer = math.ceil((plan.needed - plan.per_task) * plan.tasks / 60)
    assert plan.line("x", 2.0).endswith(f"; about {longer} more minutes of --time-budget buy the "
                                        f"{plan.needed * plan.tasks:,}")
    ample = plan_certification(study, evaluator, rows, 0.975, deadline=time.monotonic() + 36000)
    assert ample.per_task == ample.needed and ample.chance >= 0.8 > plan.chance


def test_a_plan_sized_again_at_its_first_rounds_cost_buys_what_the_time_holds(monkeypatch):
    from poptune.tune.certify import Repricing, _search_drop

    study, evaluator, rows = _setup(flipped=1, seconds=1.0)
    deadline = time.monotonic() + CLOSING_S + 200
    plan = plan_certification(study, evaluator, rows, 0.975, deadline=deadline)  # about 95 per task at 1 s
    notes: list[str] = []
    monkeypatch.setattr("poptune.progress.note", notes.append)
    seen = _search_drop(study, rows[0], ("passkey", "kv_recall"))
    cheaper = Repricing(plan, seen, 2.0, 0.975, deadline, "5/window-64/0", "accuracy")
    cap, futility = cheaper(0.3 * 64, 64)  # the first round: 32 items per task at 0.3 s each
    assert cap == cheaper.resized.per_task == min(plan.needed, cheaper.resized.affordable)
    assert 300 < cheaper.resized.affordable <= 32 + 200 / 0.3 / 2 and futility == (cap >= plan.needed)
    assert notes == [f"re-sized at the first round's 0.3 s per item (planned at 1.0): "
                     f"{cheaper.resized.line('5/window-64/0', 2.0)}"]
    dearer = Repricing(plan, seen, 2.0, 0.975, deadline, "5/window-64/0", "accuracy")
    assert dearer(2.0 * 64, 64) == (dearer.resized.per_task, False)  # 2 s per item: fewer, all spent
    assert 75 <= dearer.resized.per_task < plan.per_task and dearer.resized.smallest_budget > plan.smallest_budget
    # priced right, the round's 64 s spent from the clock: the same plan, give or take an item of rounding
    right = Repricing(plan, seen, 2.0, 0.975, deadline - 64, "5/window-64/0", "accuracy")
    right(1.0 * 64, 64)
    assert abs(right.resized.per_task - plan.per_task) <= 1


def test_the_cap_bounds_the_plan_and_at_least_one_round_is_spent():
    study, evaluator, rows = _setup(flipped=6, seconds=None, supply=200)  # no cost measured: no clock
    plan = plan_certification(study, evaluator, rows, 0.975, deadline=time.monotonic() + 60)
    assert plan.per_task == 200 and plan.affordable is None and "cap holds" in plan.line("x", 2.0)
    # a later attempt's supply is the fresh items after the earlier attempts' (issue 58), not the whole cap
    later = plan_certification(study, evaluator, rows, 0.9875, deadline=None, supply=72)
    assert later.per_task == 72 and later.supply == 72
    study, evaluator, rows = _setup(flipped=1, seconds=10.0)
    assert plan_certification(study, evaluator, rows, 0.975, deadline=time.monotonic()).per_task == 32
    assert plan_certification(study, evaluator, [], 0.975, deadline=None) is None


def test_the_cost_line_prices_the_smallest_budget_for_the_items_the_attempt_planned():
    from poptune.evaluate.racing import verdict_cost
    from poptune.tune.certify import _cost

    problem = TuningProblem(model="tiny-llama", tasks=("passkey", "kv_recall"), certify_limit=1024, max_drop=2.0)
    drop = PairedDrop(Interval(0.0, -2.5, 2.0), {"passkey": 143, "kv_recall": 143}, {"passkey": 2, "kv_recall": 1},
                      SEQUENTIAL, planned=286)
    cost = _cost(None, drop, 286.0, problem, 0.9875)
    # "the smallest budget the 286 planned items certify": 143 per task, not the cap's 1,024
    assert cost["smallest_budget"] == verdict_cost(drop, 2.0, planned=143, start=32, confidence=0.9875).smallest_budget
    assert cost["smallest_budget"] > verdict_cost(drop, 2.0, planned=1024, start=32, confidence=0.9875).smallest_budget
    assert cost["items"] == verdict_cost(drop, 2.0, planned=1024, start=32, confidence=0.9875).items  # unchanged


@pytest.mark.parametrize("value", ["0", "-3", "nan", "soon", "0.001", "1e308", "20000"])
def test_a_bad_time_budget_is_one_line(capsys, value):
    from poptune.cli import main

    try:
        code = main(["study", "--model", "tiny-llama", "--time-budget", value])
    except SystemExit as e:  # argparse's own errors
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "argument --time-budget" in err, err


def test_a_verdict_the_time_cannot_buy_passes_to_the_fastest_candidate_whose_verdict_it_can(monkeypatch):
    from poptune.tune import certify

    def row(trial: int, skip: int, speedup: float):
        return types.SimpleNamespace(trial=trial, label=f"{skip}/window-64/0", speedup=speedup, method="pop",
                                     skip=skip, drop=0.0, config=PopConfig(skip=skip, boundary="window-64"))

    def drop(flipped: int) -> dict:
        return PairedDrop(Interval(0.0, -5.0, 5.0), {"passkey": 32, "kv_recall": 32},
                          {"passkey": flipped, "kv_recall": 0}, SEQUENTIAL).to_dict()

    def study_of(*flips: int):
        return types.SimpleNamespace(trials=[types.SimpleNamespace(user_attrs={"drop": drop(f)}) for f in flips])

    fast, middle, slow = row(0, 6, 1.30), row(1, 5, 1.23), row(2, 4, 1.15)
    monkeypatch.setattr(certify.store, "front", lambda study: [fast, middle, slow])
    evaluator = types.SimpleNamespace(problem=TuningProblem(model="tiny-llama", certify_limit=1024),
                                      seconds_per_item=lambda: 1.0)
    deadline = time.monotonic() + CLOSING_S + 800  # about 400 items per task (2 tasks, 1 s per item)
    study = study_of(6, 5, 0)
    plan = plan_certification(study, evaluator, [fast], 0.975, deadline=deadline)
    assert plan.per_task < plan.needed  # the fastest's verdict is more than the clock buys
    rows, chosen, passed = certify._decidable(study, evaluator, [fast], plan, 0.975, deadline, 1024)
    assert rows == [slow] and chosen.per_task >= chosen.needed  # 5/window-64/0 flipped too: passed over as well
    assert passed["label"] == "6/window-64/0" and passed["plan"] == plan.to_dict()
    assert passed["line"].startswith(f"6/window-64/0 (1.30x) needs about {2 * plan.needed:,} fresh items for its "
                                     "verdict (~")
    assert passed["line"].endswith("more than the time budget buys: certifying 4/window-64/0 (1.15x), the fastest "
                                   "candidate whose verdict they buy (--certify N or --time-budget for 6/window-64/0)")
    # none the clock can decide: the fastest stays, as before
    hopeless = study_of(6, 6, 6)
    plan = plan_certification(hopeless, evaluator, [fast], 0.975, deadline=deadline)
    assert certify._decidable(hopeless, evaluator, [fast], plan, 0.975, deadline, 1024) == ([fast], plan, None)
    # the study's report says it first, before the raced candidates' own cost lines
    from poptune.reports.certification import cost_lines

    assert cost_lines([], {"candidates": [], "passed_over": passed}, 2.0, []) == [passed["line"]]
