"""Certification: the front's candidates are decided on items that no trial of the study scored."""

import pytest

from poptune import PopConfig, store
from poptune.cli import main
from poptune.tune.certify import WITHIN, candidates, verdict_of
from poptune.tune.problem import TuningProblem
from poptune.tune.study import StudySpec, run_study


@pytest.fixture
def problem():
    # A random tiny model fails passkey with or without POP: every drop is 0, so the fastest configurations are
    # candidates, and 8 fresh items cannot certify them (the interval stays wide).
    return TuningProblem(model="tiny-llama", tasks=("passkey",), lengths=(256,), limit=4, items_start=4,
                         max_drop=2.0, repeats=2, max_pairs=2, precision=None, decode_tokens=0, latency_points=0,
                         certify_limit=8, kv=("own",))


def test_candidates_are_certified_on_fresh_items_only(problem, tmp_path):
    exact = PopConfig(skip=1, boundary="last")
    study = run_study(StudySpec(problem=problem, trials=3, storage=f"sqlite:///{tmp_path}/s.db", enqueue=(exact,)))
    record = study.user_attrs["certification"]
    assert record["fresh_from"] == 4 and record["cap"] == 8 and record["max_drop"] == 2.0
    labels = [c["label"] for c in record["candidates"]]
    assert labels and labels == [r.label for r in candidates(study, 2.0, 2)]  # the front's fastest, in order
    entry = record["candidates"][0]
    assert entry["drop"]["items"] == {"passkey": 8}
    assert entry["drop"]["method"] == "betting-cs" and entry["drop"]["hi"] > 2.0
    assert entry["verdict"] == "undecided at 8 items"
    # the full model scored the fresh items once (positions 4..11 of the order), stored for a later run
    assert store.StoredTrial  # the reader is public
    full = study.user_attrs["full_run"]["items"]["passkey"]
    assert len(full) == 12 and full[4:] == list(range(4, 12))
    rows = store.certified(study)
    assert [r.label for r in rows] == labels and rows[0].items == 8
    # the verdict of a study with trials of fresh items below its budget never reads "certified within"
    assert all(r.verdict != WITHIN for r in rows)


def test_the_command_prints_the_verdict(problem, tmp_path, capsys):
    code = main(["study", "--model", "tiny-llama", "--tasks", "passkey", "--lengths", "256", "--limit", "4",
                 "--items", "4", "--certify", "8", "--trials", "2", "--kv", "own", "--repeats", "2", "--precision", "0",
                 "--storage", f"sqlite:///{tmp_path}/s.db", "--enqueue", "1/last/0"])
    out = capsys.readouterr().out
    assert code == 0
    assert "search front (not yet a verdict" in out
    assert "verdict: " in out


def test_verdicts_and_candidates():
    assert verdict_of("within budget", 256) == WITHIN
    assert verdict_of("beyond budget", 64) == "certified beyond"
    assert verdict_of("cap", 320) == "undecided at 320 items"
    with pytest.raises(Exception):
        TuningProblem(certify_limit=-1)
