"""Certification: the front's candidates are decided on items that no trial of the study scored."""

from dataclasses import replace

import pytest

from poptune import ConfigError, PopConfig, store
from poptune.cli import main
from poptune.problem.evaluator import ConfigEvaluator
from poptune.problem.problem import TuningProblem
from poptune.store.front import FrontRow
from poptune.tune.certify import ERROR, WITHIN, attempt_error, attempt_items, certify_front, spent_error, verdict_of
from poptune.tune.study import StudySpec, run_study


@pytest.fixture
def problem():
    # A random tiny model fails passkey with or without POP: every drop is 0, and 8 fresh items cannot certify
    # (the interval stays wide).
    return TuningProblem(model="tiny-llama", tasks=("passkey",), lengths=(256,), limit=4, items_start=4,
                         max_drop=2.0, repeats=2, max_pairs=2, precision=None, decode_tokens=0, latency_points=0,
                         certify_limit=8, kv=("own",))


def test_candidates_are_certified_on_fresh_items_only(problem, tmp_path, monkeypatch):
    exact = PopConfig(skip=1, boundary="last")
    evaluator = ConfigEvaluator(problem)
    study = run_study(StudySpec(problem=problem, trials=3, storage=f"sqlite:///{tmp_path}/s.db", enqueue=(exact,),
                                confirm=False), evaluator=evaluator)  # no trust checks: certified below, by hand
    assert "certification" not in study.user_attrs
    # The front of a tiny model is decided by timing noise: certify the exact configuration as the candidate.
    trial = next(t for t in store.completed(study) if t.user_attrs["config"] == exact.to_dict())
    monkeypatch.setattr("poptune.tune.certify.candidates", lambda *args: [FrontRow.from_trial(trial)])
    record = certify_front(study, evaluator)
    assert record["fresh_from"] == 4 and record["cap"] == 8 and record["max_drop"] == 2.0
    (entry,) = record["candidates"]
    assert entry["label"] == "1/last/0" and entry["trial"] == trial.number
    assert entry["drop"]["items"] == {"passkey": 8} and entry["drop"]["method"] == "score-sequential"
    assert entry["drop"]["flipped"] == {"passkey": 0} and entry["drop"]["hi"] > 2.0  # exact, yet 8 items are few
    assert entry["verdict"] == "undecided at 8 items"
    # the full model scored the fresh items once (positions 4..11 of the order), stored for a later run
    full = study.user_attrs["full_run"]["items"]["passkey"]
    assert len(full) == 12 and full[4:] == list(range(4, 12))
    (row,) = store.certified(study)
    assert row.label == "1/last/0" and row.items == 8 and row.verdict != WITHIN
    assert row.drop_ci is not None and row.drop_ci.hi == entry["drop"]["hi"]
    # its accuracy is its own on the fresh items (nothing flipped: the full model's there), never the search's
    # reference minus the fresh drop (which could fall below 0 where the two item sets differ)
    fresh_full = study.user_attrs["full_run"]["outcomes"]["passkey"][4:]
    assert row.accuracy == entry["accuracy"] == pytest.approx(sum(fresh_full) / len(fresh_full))
    # what deciding it would cost: items at its flip rate, minutes at the seconds per item measured here
    cost = entry["cost"]
    assert cost["items"] + 8 == cost["per_task"] and cost["items"] > 8 and cost["seconds_per_item"] > 0
    assert cost["smallest_budget"] > 2.0
    assert cost["minutes"] == pytest.approx(cost["items"] * cost["seconds_per_item"] / 60)
    # a second certification keeps the first as an attempt, and spends half of what the first did: however
    # often a study is certified again, its attempts together spend at most the 2.5% error
    assert record["attempt"] == 1 and record["error"] == 0.0125 and record["confidence"] == pytest.approx(0.975)
    # issue 58: a later attempt scores only items no attempt saw, so the same cap has none left to give it
    with pytest.raises(ConfigError, match="took the first 8 fresh items"):
        certify_front(study, evaluator)
    # the next --certify N is the fresh positions in all: the cost line's command asks for the 8 used plus more
    assert cost["per_task"] == 8 + cost["items"]
    wider = replace(problem, certify_limit=16)
    again = certify_front(study, ConfigEvaluator(wider))
    assert again["fresh_from"] == 12 and again["cap"] == 8 and again["limit"] == 16  # positions 12..19, new ones
    assert again["candidates"][0]["drop"]["items"] == {"passkey": 8}
    assert len(again["attempts"]) == 1 and again["attempts"][0]["date"] == record["date"]
    assert "attempts" not in again["attempts"][0]
    assert again["attempt"] == 2 and again["confidence"] == pytest.approx(1 - 2 * 0.00625)
    assert spent_error(again) == pytest.approx(0.01875)
    full = study.user_attrs["full_run"]["items"]["passkey"]
    assert full[12:] == list(range(12, 20))


def test_a_plan_that_buys_less_than_a_verdict_spends_it_all_without_a_futility_stop(problem, tmp_path,
                                                                                    monkeypatch):
    # The 2026-12-06 likelihood study bought 220 of the 328 items its verdict needed and said they certify about
    # 2.8 points; its race then stopped for futility at 64 (no outcome certifies 2 points on 220), drop <= 25.
    exact = PopConfig(skip=1, boundary="last")
    evaluator = ConfigEvaluator(problem)
    study = run_study(StudySpec(problem=problem, trials=3, storage=f"sqlite:///{tmp_path}/s.db", enqueue=(exact,),
                                confirm=False), evaluator=evaluator)
    trial = next(t for t in store.completed(study) if t.user_attrs["config"] == exact.to_dict())
    monkeypatch.setattr("poptune.tune.certify.candidates", lambda *args: [FrontRow.from_trial(trial)])
    asked: list[bool] = []
    race = evaluator.race_accuracy
    monkeypatch.setattr(evaluator, "race_accuracy", lambda *a, **k: asked.append(k["futility"]) or race(*a, **k))
    record = certify_front(study, evaluator, planned=True, deadline=None)
    assert record["plan"]["per_task"] == 8 < record["plan"]["needed"] and asked == [False]  # the cap's 8: spent
    assert record["candidates"][0]["drop"]["items"] == {"passkey": 8}
    certify_front(study, ConfigEvaluator(replace(problem, certify_limit=16)))  # no plan (--certify N): it may stop
    assert asked == [False]  # the spy is on the first evaluator only


def test_a_time_budgeted_plan_is_sized_again_at_what_its_first_round_cost(problem, tmp_path, monkeypatch):
    # The 2026-12-06 likelihood study priced an item at the search's 6.3 s, and its certification's shared trunk
    # then spent 4.9 s: it bought 308 items where the time held about 400. The first round's seconds now set the
    # cap, before its look.
    import time

    exact = PopConfig(skip=1, boundary="last")
    wide = replace(problem, certify_limit=40)
    evaluator = ConfigEvaluator(wide)
    study = run_study(StudySpec(problem=wide, trials=3, storage=f"sqlite:///{tmp_path}/s.db", enqueue=(exact,),
                                confirm=False), evaluator=evaluator)
    trial = next(t for t in store.completed(study) if t.user_attrs["config"] == exact.to_dict())
    monkeypatch.setattr("poptune.tune.certify.candidates", lambda *args: [FrontRow.from_trial(trial)])
    monkeypatch.setattr(evaluator, "seconds_per_item", lambda: 1e4)  # the search's price buys one round only
    notes: list[str] = []
    monkeypatch.setattr("poptune.progress.note", notes.append)
    record = certify_front(study, evaluator, planned=True, deadline=time.monotonic() + 3600)
    assert record["plan"]["per_task"] == 32 and record["plan"]["affordable"] == 0
    assert record["resized"]["per_task"] == record["cap"] == 40 and record["resized"]["seconds_per_item"] < 1e4
    assert record["candidates"][0]["drop"]["items"] == {"passkey": 40}  # the race went on to the new cap
    assert record["candidates"][0]["drop"]["planned"] == 40  # its design is the one planned at 40 items
    assert notes[-1].startswith("re-sized at the first round's ") and "(planned at 10000.0): certifying 1/last/0 " \
        "on 40 fresh items" in notes[-1]
    # the next attempt's fresh items start after the 40 this one took
    assert attempt_items(record, 4, 80) == (44, 40)


def test_the_command_prints_the_verdict(problem, tmp_path, capsys):
    code = main(["study", "--model", "tiny-llama", "--tasks", "passkey", "--lengths", "256", "--limit", "4",
                 "--items", "4", "--certify", "8", "--trials", "2", "--kv", "own", "--repeats", "2", "--precision", "0",
                 "--storage", f"sqlite:///{tmp_path}/s.db", "--enqueue", "1/last/0"])
    out = capsys.readouterr().out
    assert code == 0
    assert "search front (not yet a verdict" in out
    assert "verdict: " in out
    # a complete study asked for more fresh items certifies again, without measuring a trial
    code = main(["study", "--model", "tiny-llama", "--tasks", "passkey", "--lengths", "256", "--limit", "4",
                 "--items", "4", "--certify", "16", "--trials", "2", "--kv", "own", "--repeats", "2",
                 "--precision", "0", "--storage", f"sqlite:///{tmp_path}/s.db", "--enqueue", "1/last/0"])
    assert code == 0
    study = store.read_study(f"sqlite:///{tmp_path}/s.db", None)
    record = study.user_attrs["certification"]
    # the second attempt scores the 8 fresh positions after the first's (issue 58), never the first's again
    assert record["cap"] == 8 and record["fresh_from"] == 12 and record["limit"] == 16
    assert len(record["attempts"]) == 1 and record["attempts"][0]["cap"] == 8
    assert record["attempts"][0]["fresh_from"] == 4
    # the same command again reports the study as it is; a --certify N within the 16 positions taken is one line
    again = ["study", "--model", "tiny-llama", "--tasks", "passkey", "--lengths", "256", "--limit", "4", "--items",
             "4", "--trials", "2", "--kv", "own", "--repeats", "2", "--precision", "0", "--storage",
             f"sqlite:///{tmp_path}/s.db", "--enqueue", "1/last/0"]
    capsys.readouterr()
    assert main([*again, "--certify", "16"]) == 0 and "verdict: " in capsys.readouterr().out
    assert main([*again, "--certify", "12"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("--certify 12: earlier certifications took the first 16 fresh items per task, and a new "
                        "attempt scores only items none of them saw: ask for more") and "\n" not in err
    assert store.read_study(f"sqlite:///{tmp_path}/s.db", None).user_attrs["certification"] == record  # untouched


def test_each_attempt_starts_after_the_last_ones_cap():
    assert attempt_items(None, 32, 128) == (32, 128)
    assert attempt_items({"fresh_from": 32, "cap": 100, "limit": 128}, 32, 300) == (132, 200)  # a planned 100
    assert attempt_items({"fresh_from": 132, "cap": 200, "limit": 300}, 32, 400) == (332, 100)
    with pytest.raises(ConfigError, match="took the first 100 fresh items"):
        attempt_items({"fresh_from": 32, "cap": 100, "limit": 128}, 32, 100)


def test_the_cost_lines_follow_up_certifies_again_after_a_planned_attempt_below_the_cap(problem):
    import optuna

    from poptune.tune.certify import wants_certification

    study = optuna.create_study()
    assert wants_certification(study, problem)  # none yet
    # a planned first attempt took 143 of its 1,024 positions per task (the time budget bought no more)
    store.StoredStudy.of(study).set_certification({"fresh_from": 4, "cap": 143, "limit": 1024})
    assert not wants_certification(study, replace(problem, certify_limit=1024))  # the same command again
    assert wants_certification(study, replace(problem, certify_limit=336))  # the cost line's --certify 336
    assert not wants_certification(study, replace(problem, certify_limit=143))  # nothing fresh beyond the 143
    assert wants_certification(study, replace(problem, certify_limit=2048))


def test_attempts_share_the_error_and_older_records_count_as_spending_all_of_it():
    assert sum(attempt_error(k) for k in range(1, 60)) == pytest.approx(ERROR) and attempt_error(1) == ERROR / 2
    with pytest.raises(ValueError):
        attempt_error(0)
    assert spent_error(None) == 0.0
    assert spent_error({"confidence": 0.95, "attempts": []}) == ERROR  # stored before the error was shared
    assert spent_error({"error": 0.00625, "attempts": [{"error": 0.0125}]}) == pytest.approx(0.01875)


def test_verdicts_and_candidates():
    assert verdict_of("within budget", 256) == WITHIN
    assert verdict_of("beyond budget", 64) == "certified beyond"
    assert verdict_of("cap", 320) == "undecided at 320 items"
    with pytest.raises(ConfigError, match="`certify_limit` must be an integer >= 0"):
        TuningProblem(certify_limit=-1)
