"""The methods board: baselines paired with the POP row at least as fast, verdicts at a shared level, rebuilt
byte for byte from the raw records."""

import json
from pathlib import Path

import pytest

from poptune import ConfigError
from poptune.comparison.board import rows_of, write_methods_board


def _timing(speedup, pairs=6):
    a = [10.0 / speedup] * pairs
    return {"2048+32": {"ttft_ms": {"a": a, "b": [10.0] * pairs}, "tpot_ms": {"a": [1.0] * pairs, "b": [1.0] * pairs}}}


def _entry(name, method, outcomes, speedup=None):
    entry = {"name": name, "method": method, "label": name, "ratio": 0.3, "config": {}, "details": {},
             "outcomes": {"t": outcomes}, "items": {"t": list(range(len(outcomes)))}}
    if speedup:
        entry["timing"] = _timing(speedup)
    return entry


def _record(methods):
    return {"record": "poptune-methods", "version": 1, "workload": "w", "model": "m", "num_layers": 18,
            "tasks": ["t"], "per_task": 200, "hardware": {"hardware_id": "cpu-x", "name": "X"}, "versions": {},
            "profiles": [[2048, 32]], "pairs": 6, "decode_steps": 16, "methods": methods, "command": "c", "date": "d"}


N = 200
GOOD = [1.0] * N
HALF = [1.0, 0.0] * (N // 2)


def test_each_baseline_meets_the_slowest_pop_row_at_least_as_fast_and_gets_a_verdict():
    record = _record([_entry("full", "full", GOOD), _entry("pop a", "pop", GOOD, 1.3),
                      _entry("pop b", "pop", HALF, 1.8), _entry("static 1", "static-last", HALF, 1.2),
                      _entry("static 2", "static-last", HALF, 1.5), _entry("static 3", "static-last", GOOD, 2.5)])
    rows = {r.name: r for r in rows_of(record)}
    assert rows["static 1"].against == "pop a" and not rows["static 1"].slower  # 1.3 >= 1.2, slower than 1.8
    assert rows["static 1"].verdict == "POP more accurate" and rows["static 1"].lead.mean == pytest.approx(50.0)
    assert rows["static 2"].against == "pop b" and rows["static 2"].verdict == f"undecided at {N} items"
    # no POP row is as fast: the fastest, marked; the baseline is more accurate than it
    assert rows["static 3"].against == "pop b" and rows["static 3"].slower
    assert rows["static 3"].verdict == "baseline more accurate"
    # three baseline rows share the error: each interval at 1 - 0.05 / 3
    assert rows["static 1"].lead.confidence == pytest.approx(1 - 0.05 / 3)
    assert rows["pop a"].lead is None and rows["full"].drop.mean == 0.0


def test_a_record_of_another_kind_or_without_the_full_model_is_refused():
    with pytest.raises(ConfigError, match="not a methods comparison record"):
        rows_of({**_record([]), "version": 9})
    with pytest.raises(ConfigError, match="full model"):
        rows_of(_record([_entry("pop a", "pop", GOOD, 1.3)]))


def test_the_board_is_rebuilt_byte_for_byte_from_the_records(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    record = _record([_entry("full", "full", GOOD), _entry("pop a", "pop", GOOD, 1.3),
                      _entry("static 1", "static-last", HALF, 1.2)])
    (raw / "methods-w-m-cpu-x.json").write_text(json.dumps(record))
    first = write_methods_board(raw, tmp_path / "a", command="poptune leaderboard --records raw")
    second = write_methods_board(raw, tmp_path / "b", command="poptune leaderboard --records raw")
    assert [p.name for p in first] == ["methods-m-cpu-x.md", "methods-m-cpu-x.csv", "methods-m-cpu-x.png"]
    for a, b in zip(first, second):
        assert a.read_bytes() == b.read_bytes()
    text = first[0].read_text()
    assert "| static-last | static 1 |" in text and "POP more accurate" in text
    assert "1 of 1 baseline verdicts decided" in text


def test_a_label_cannot_add_rows_or_cells_to_the_table(tmp_path):
    """Issue 87: a record whose label holds a line break and ``|`` added a fake row to the Markdown table."""
    raw = tmp_path / "raw"
    raw.mkdir()
    fake = dict(_entry("static 1", "static-last", HALF, 1.2), label="x\n| full | fake | 99.99 |")
    record = _record([_entry("full", "full", GOOD), _entry("pop a", "pop", GOOD, 1.3), fake])
    (raw / "methods-w-m-cpu-x.json").write_text(json.dumps(record))
    text = write_methods_board(raw, tmp_path / "a", command="c")[0].read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| method")]
    assert len(rows) == 3 and sum(line.startswith("| full |") for line in rows) == 1
    assert "| x \\| full \\| fake \\| 99.99 \\| |" in text


def test_a_record_scored_without_timing_borrows_the_timings_of_its_machine(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    timed = _record([_entry("full", "full", GOOD), _entry("pop a", "pop", GOOD, 1.3),
                     _entry("static 1", "static-last", HALF, 1.2)])
    untimed = {**_record([_entry("full", "full", GOOD), _entry("pop a", "pop", HALF), _entry("static 1", "static-last",
                                                                                          GOOD)]), "workload": "v"}
    (raw / "methods-a.json").write_text(json.dumps(timed))
    (raw / "methods-b.json").write_text(json.dumps(untimed))
    md = write_methods_board(raw, tmp_path / "out", command="c")[0].read_text()
    assert "## v: t" in md and "timings from `methods-a.json`" in md
    assert "baseline more accurate" in md  # the untimed workload's rows were paired with the borrowed speeds


def test_a_timings_only_record_lends_its_timings_and_makes_no_table(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    scored = _record([_entry("full", "full", GOOD), _entry("pop a", "pop", GOOD), _entry("static 1", "static-last",
                                                                                      HALF)])
    timings = {**_record([{k: v for k, v in e.items() if k not in ("outcomes", "items")} for e in
                          (_entry("full", "full", GOOD), _entry("pop a", "pop", GOOD, 1.3),
                           _entry("static 1", "static-last", HALF, 1.2))]), "tasks": [], "per_task": 0,
               "workload": "request-timing"}
    (raw / "methods-a.json").write_text(json.dumps({**scored, "skip": 48}))
    (raw / "methods-z.json").write_text(json.dumps(timings))
    md = write_methods_board(raw, tmp_path / "out", command="c")[0].read_text()
    assert "request-timing" not in md.split("## Provenance")[0]  # no table of its own
    assert "after the first 48 of each task's order" in md
    assert "1.20x" in md and "POP more accurate" in md  # the timings-only record's speeds pair the rows
    assert "timings from `methods-z.json`" in md and "(timings only)" in md


def test_an_undecided_row_says_what_its_decision_would_cost(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    few = 24
    close = ([1.0] * 11 + [0.0]) * (few // 12)  # 2 losses in 24 items: undecided
    record = {**_record([{**_entry("full", "full", [1.0] * few), "score_seconds": 24.0},
                         {**_entry("pop a", "pop", [1.0] * few, 1.3), "score_seconds": 12.0},
                         {**_entry("static 1", "static-last", close, 1.2), "score_seconds": 12.0}]),
              "command": "poptune compare --items 24 --out x.json"}
    (raw / "methods-a.json").write_text(json.dumps(record))
    md = write_methods_board(raw, tmp_path / "out", command="c")[0].read_text()
    assert "undecided at 24 items" in md
    line = next(x for x in md.splitlines() if x.startswith("- static 1 against pop a"))
    per_task = int(line.split("about ")[1].split(" items")[0])
    seen = record.get("skip", 0) + record["per_task"]  # every item the record scored: the follow-up skips them
    assert per_task > few and (f"`poptune compare --items {per_task} --out leaderboards/raw/methods-a-from-{seen}.json "
                                f"--skip {seen}`") in line
    assert f"~{2.0 * per_task / 60:,.0f} min" in line  # 48 s for 24 items, every method: 2 s per item


def test_the_committed_board_is_what_the_committed_records_rebuild(tmp_path, monkeypatch):
    """`poptune leaderboard --records leaderboards/raw` gives the committed table and CSV byte for byte."""
    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(root)
    written = write_methods_board("leaderboards/raw", tmp_path,
                                  command="poptune leaderboard --records leaderboards/raw")
    texts = [p for p in written if p.suffix in (".md", ".csv")]
    assert texts
    for path in texts:
        assert path.read_bytes() == (root / "leaderboards" / path.name).read_bytes(), path.name
