"""Every printed header carries its own level (issue 58): a certification's table says 97.5%, 98.75%, ...,
never the 95% of a search's."""

import pytest

from poptune.engine import PopConfig
from poptune.interval import Interval
from poptune.reports.study_report import front_table, level, verdict_table
from poptune.store.front import FrontRow

ROW = FrontRow(trial=3, config=PopConfig(5, "window-64"), method="pop", speedup=1.26,
               drop=0.4, feasible=True, items=256, speedup_ci=Interval(1.26, 1.16, 1.32), pairs=16,
               drop_ci=Interval(0.4, -1.1, 1.9), verdict="certified within", values={"ttft": 8.0, "accuracy": 0.78})


@pytest.mark.parametrize("confidence, label", [(0.95, "95"), (0.975, "97.5"), (0.9875, "98.75"),
                                               (0.99375, "99.375")])
def test_the_certified_tables_header_is_built_from_the_records_confidence(confidence, label):
    record = {"confidence": confidence, "candidates": [], "attempts": []}
    for markdown in (False, True):
        head = verdict_table([ROW], record=record, markdown=markdown).splitlines()[0]
        assert f"drop [{label}% CI]" in head and (label == "95" or "drop [95% CI]" not in head), head
    assert level(confidence) == label


def test_the_search_front_keeps_its_95_percent_and_a_level_can_be_given_without_a_record():
    assert "drop [95% CI]" in front_table([ROW]).splitlines()[0]
    assert "drop [98.75% CI]" in verdict_table([ROW], confidence=0.9875).splitlines()[0]
    assert "drop [95% CI]" in verdict_table([ROW]).splitlines()[0]  # nothing says otherwise: the search's level
