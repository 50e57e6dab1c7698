"""The certification's lines: a verdict states its bound, an early stop is marked, an undecided candidate says
what deciding it costs and how."""

from dataclasses import replace

from poptune.engine import PopConfig
from poptune.evaluate.paired import paired_drop
from poptune.interval import Interval
from poptune.reports import certification as certreport
from poptune.store.front import FrontRow

ROW = FrontRow(trial=3, config=PopConfig(5, "window-64"), method="pop", speedup=1.26,
               drop=-3.12, feasible=True, items=128, speedup_ci=Interval(1.26, 1.16, 1.32), pairs=16,
               values={"ttft": 8.0, "accuracy": 0.78})


def _record(drop, verdict, cost=None):
    entry = {"trial": 3, "verdict": verdict, "drop": drop.to_dict(), "items": drop.total}
    if cost:
        entry["cost"] = cost
    return {"confidence": 0.95, "candidates": [entry], "attempts": []}


def test_a_certified_row_states_its_bound_and_an_early_stop_is_marked():
    full, pop = {"a": [1.0] * 128, "b": [1.0] * 128}, {"a": [1.0] * 128, "b": [1.0] * 128}
    drop = paired_drop(full, pop, looks=[{"a": 64, "b": 64}, {"a": 128, "b": 128}], planned=512)
    record = _record(drop, "certified within")
    line = certreport.verdict_line([replace(ROW, verdict="certified within")], record, 2.0)
    assert f"drop <= {drop.hi:.2f} points (one-sided 97.5%, valid at every look) on 128 fresh items" in line
    assert line.endswith("(its search trial)")
    assert "-3.12" not in line  # the point estimate at a data-dependent stop is not the claim
    cell = certreport.verdict_cells([replace(ROW, verdict="certified within")], record)[0]
    assert "stopped at 256 of 512 planned items" in cell
    first = certreport.claim(record["candidates"][0], {**record, "confidence": 0.975})  # a study's first attempt
    assert "(one-sided 98.75%, valid at every look)" in first  # its level, never rounded up to 98.8%
    assert "(one-sided 99.375%," in certreport.claim(record["candidates"][0], {**record, "confidence": 0.9875})


def test_an_undecided_candidate_says_what_a_verdict_costs_and_the_command():
    full = {"a": [1.0] * 32, "b": [1.0] * 32}
    drop = paired_drop(full, {"a": [0.0] * 3 + [1.0] * 29, "b": [1.0] * 32})
    cost = {"flip_rate": 0.06, "items": 1400, "per_task": 700, "seconds_per_item": 1.5, "minutes": 35.0,
            "smallest_budget": 9.4, "power": 0.8}
    record = _record(drop, "undecided at 64 items", cost)
    runs = [{"command": ["/x/poptune", "study", "--model", "gemma-3", "--certify", "32"]}]
    lines = certreport.cost_lines([replace(ROW, verdict="undecided at 64 items")], record, 2.0, runs)
    assert lines == ["5/window-64/0: undecided at 64 items: a 2-point verdict needs about 1,400 items here (~35 min "
                     "at 1.5 s per item) for 80% power if the true drop is 0 and items flip at the 6.0% rate seen so "
                     "far: poptune study --model gemma-3 --certify 700; the smallest budget the 64 planned items "
                     "certify as often at this flip rate: about 9.4 points"]
    assert "(a larger --certify" not in certreport.verdict_line([replace(ROW, verdict="undecided at 64 items")],
                                                                record, 2.0)


def test_a_study_certified_again_says_what_its_attempts_spent_together():
    full, pop = {"a": [1.0] * 128, "b": [1.0] * 128}, {"a": [1.0] * 128, "b": [1.0] * 128}
    drop = paired_drop(full, pop)
    record = {**_record(drop, "certified within"), "error": 0.00625, "attempts": [{"error": 0.0125}]}
    line = certreport.verdict_line([replace(ROW, verdict="certified within")], record, 2.0)
    assert line.endswith("(certification 2 of this study; together they spent 1.88% of 2.5% error)")
    legacy = {**record, "attempts": [{"confidence": 0.95}]}  # stored when every attempt spent all of it
    assert "together they spent 3.12% of 2.5% error" in certreport.verdict_line(
        [replace(ROW, verdict="certified within")], legacy, 2.0)
