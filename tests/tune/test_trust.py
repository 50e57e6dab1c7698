"""Studies whose latencies can be trusted: a one-to-one space, noisy trials marked and re-measured, the
confirmation pass, old studies still read. A synthetic evaluator stands in for the model (seconds, no timing)."""

from __future__ import annotations

import optuna
import pytest

from poptune import PopConfig, store
from poptune.env import TuningProblem
from poptune.measure.nullcheck import AA_PAIRS
from poptune.measure.stats import MIN_PAIRS_95
from poptune.problem.space import all_configs, paper_default
from poptune.tune.params import config_of_trial, params_of
from poptune.tune.study import StudySpec, run_study
from poptune.tune.trust import CONFIRM_PAIRS, CONFIRM_ROUNDS, record_aa_check

from .fakes import LAYERS, FakeEvaluator, ideal, pair, problem, quiet_timing, true  # noqa: F401  (fixtures)

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _measuring(study):
    return [t for t in store.completed(study) if not {"reused_from", "remeasure_of"} & set(t.user_attrs)]


def test_space_is_one_to_one():
    configs = all_configs(LAYERS)
    assert len(configs) == len(set(configs)) == 1 + 5 * (3 + 3 + 3 + 2 + 1)
    assert all(c.skip + c.offset <= LAYERS - 1 for c in configs)
    assert len({tuple(sorted(params_of(c).items())) for c in configs}) == len(configs)


def test_space_with_calibrated_kv_is_one_to_one_and_has_no_alias_at_one_skipped_layer():
    kv = ("own", "calibrated")
    configs = all_configs(LAYERS, kv)
    # Skip 1 (3 offsets) has no map to calibrate: only its own K/V; every other point twice.
    assert len(configs) == len(set(configs)) == 1 + 5 * 3 + 2 * 5 * (3 + 3 + 2 + 1)
    assert PopConfig(1, kv="calibrated") not in configs and PopConfig(2, kv="calibrated") in configs
    assert len({tuple(sorted(params_of(c, kv).items())) for c in configs}) == len(configs)
    assert all("kv" not in params_of(c, kv) for c in configs if c.skip < 2)


@pytest.mark.parametrize("sampler", ["tpe", "random", "grid"])
def test_sixteen_trials_store_sixteen_distinct_configurations_whose_params_are_their_configs(problem, tmp_path,
                                                                                              sampler):
    study = run_study(StudySpec(problem=problem, trials=16, sampler=sampler, storage=f"sqlite:///{tmp_path}/s.db"),
                      evaluator=FakeEvaluator(problem))
    measured = _measuring(study)
    configs = [PopConfig.from_dict(t.user_attrs["config"]) for t in measured]
    assert len(configs) == 16 and len(set(configs)) == 16
    for trial in store.completed(study):
        assert trial.params == params_of(PopConfig.from_dict(trial.user_attrs["config"]), problem.kv)
    answered = [t for t in store.completed(study) if "reused_from" in t.user_attrs]
    assert len(store.completed(study)) == 16 + len(answered)  # answers from storage used no budget


def test_noisy_middle_trials_are_marked_remeasured_and_kept_off_the_front(problem, tmp_path, quiet_timing):
    evaluator = FakeEvaluator(problem, loaded={4, 5, 6})
    study = run_study(StudySpec(problem=problem, trials=8, sampler="random", storage=f"sqlite:///{tmp_path}/s.db"),
                      evaluator=evaluator)
    trials = store.completed(study)
    noisy = [t for t in trials if t.user_attrs["noisy"] and "reused_from" not in t.user_attrs]
    assert len(noisy) == 3  # the evaluations 4-6 ran under load
    for t in noisy:
        assert t.user_attrs["speedup"] > 6 and t.user_attrs["null_check"]["reasons"]
        again = [r for r in trials if r.user_attrs.get("remeasure_of") == t.number]
        assert again and not again[-1].user_attrs["noisy"] and again[-1].params == t.params
    front = store.front(study)
    assert front and all(r.confirmed for r in front)
    assert all(r.speedup_ci.lo <= r.ideal for r in front)
    assert not {r.trial for r in front} & {t.number for t in noisy}
    checks = study.user_attrs["null_checks"]
    assert [c["when"] for c in checks] == ["start", "end"] and not any(c["noisy"] for c in checks)
    assert all(c["pairs"] == AA_PAIRS and c["equivalent"] and c["margin"] == 0.05 for c in checks)
    (run,) = study.user_attrs["runs"]
    assert {"command", "poptune", "git_commit", "weights_fingerprint", "attn_implementation", "dtype",
            "torch_threads", "thread_env", "load_start", "load_end"} <= set(run)
    assert run["weights_fingerprint"].startswith("random-seed0") and run["load_end"] is not None


@pytest.mark.parametrize("sole", [False, True])
def test_on_a_journal_only_a_sole_worker_times_the_checks(problem, tmp_path, quiet_timing, sole):
    # Workers sharing a journal leave the A/A checks, re-timings and confirmation to a later single run; a grid's
    # one process (sole_worker) runs them as on SQLite, and keeps its seed (the same grid order every run).
    spec = StudySpec(problem=problem, trials=5, sampler="grid", storage=f"journal:{tmp_path}/s.journal",
                     sole_worker=sole)
    study = run_study(spec, evaluator=FakeEvaluator(problem))
    checks = study.user_attrs.get("null_checks", [])
    assert [c["when"] for c in checks] == (["start", "end"] if sole else [])
    assert ("confirmation" in study.user_attrs) == sole
    if sole:
        again = run_study(StudySpec(problem=problem, trials=5, sampler="grid", storage=f"sqlite:///{tmp_path}/g.db"),
                          evaluator=FakeEvaluator(problem))
        order = [tuple(sorted(t.params.items())) for t in _measuring(study)]
        assert order == [tuple(sorted(t.params.items())) for t in _measuring(again)]


def test_confirmation_pass_retimes_the_front_together_and_the_front_reads_it(problem, tmp_path, quiet_timing):
    study = run_study(StudySpec(problem=problem, trials=6, sampler="random", storage=f"sqlite:///{tmp_path}/s.db"),
                      evaluator=FakeEvaluator(problem))
    confirmation = study.user_attrs["confirmation"]
    unconfirmed = store.front(study, confirmed=False)
    assert set(confirmation["trials"]) == {str(r.trial) for r in unconfirmed}
    pairs = CONFIRM_ROUNDS * CONFIRM_PAIRS
    assert CONFIRM_PAIRS % 2 == 0 and pairs >= MIN_PAIRS_95  # whole A-B/B-A blocks a round, a 95% interval at 95%
    assert confirmation["rounds"] == CONFIRM_ROUNDS
    assert all(f["pairs"] == pairs for f in confirmation["trials"].values())
    # Interleaved: each round timed every front configuration once, in the same order (after the start A/A).
    front_configs = [config_of_trial(study.trials[r], LAYERS) for r in map(int, confirmation["trials"])]
    timed = quiet_timing[1:1 + CONFIRM_ROUNDS * len(front_configs)]
    assert timed == front_configs * CONFIRM_ROUNDS
    for row in store.front(study):
        fig = confirmation["trials"][str(row.trial)]
        assert row.confirmed and row.speedup == fig["speedup"] and row.pairs == pairs
        assert row.prefill_ms == pytest.approx(study.user_attrs["reference_prefill_ms"] / fig["speedup"])


def test_a_certifying_study_confirms_only_the_certifications_candidates(problem, tmp_path, quiet_timing):
    # On long prompts re-timing the whole front cost minutes the certification needs: when the study certifies,
    # only the rows a verdict is given for are re-timed (the fastest whose drop so far is within the budget).
    from dataclasses import replace

    from poptune.store.front import candidates

    certifying = replace(problem, max_drop=2.5, certify_candidates=1)
    study = run_study(StudySpec(problem=certifying, trials=8, sampler="random",
                                storage=f"sqlite:///{tmp_path}/s.db"), evaluator=FakeEvaluator(certifying))
    confirmed = set(study.user_attrs["confirmation"]["trials"])
    rows = store.front(study)
    chosen = candidates(rows, 2.5, 1)
    assert chosen and confirmed == {str(r.trial) for r in chosen}
    assert len(rows) > len(chosen)  # the rest of the front keeps its trials' figures
    assert [c["trial"] for c in study.user_attrs["certification"]["candidates"]] == [r.trial for r in chosen]


@pytest.mark.parametrize(("ratios", "noisy"), [
    ([0.42, 0.75, 0.90, 1.02, 1.08], True),  # the spread of the A/A that passed as 0.904 [0.420, 1.081]
    ([1.0 + 0.01 * ((i % 5) - 2) for i in range(7)], False),  # quiet: within +-2%
])
def test_the_aa_check_flags_a_run_whose_pairs_do_not_show_equivalence(problem, monkeypatch, ratios, noisy):
    def timed(evaluator, config, pairs, warmup, lengths=None):
        assert config == PopConfig(skip=0) and pairs == AA_PAIRS
        return {16: (pair([ratios[i % len(ratios)] for i in range(pairs)]), 1.0)}

    monkeypatch.setattr("poptune.tune.trust._time", timed)
    study = optuna.create_study()
    entry = record_aa_check(study, FakeEvaluator(problem), "start")
    assert entry["noisy"] is noisy and entry["equivalent"] is not noisy and bool(entry["reasons"]) is noisy
    assert entry["pairs"] == AA_PAIRS and entry["confidence"] == 0.9 and entry["lo"] <= entry["speedup"] <= entry["hi"]
    assert study.user_attrs["null_checks"] == [entry]


def test_a_configuration_confirmed_above_its_ideal_leaves_the_front(problem, tmp_path, monkeypatch):
    def too_fast(evaluator, config, pairs, warmup, lengths=None):
        return {16: (pair([3.0 if config.skip else 1.0] * pairs), ideal(config))}

    monkeypatch.setattr("poptune.tune.trust._time", too_fast)
    study = run_study(StudySpec(problem=problem, trials=5, sampler="random", storage=f"sqlite:///{tmp_path}/s.db"),
                      evaluator=FakeEvaluator(problem))
    above = {int(n) for n, f in study.user_attrs["confirmation"]["trials"].items() if f["above_ideal"]}
    assert above and all(study.trials[n].user_attrs["config"]["skip"] for n in above)
    assert not {r.trial for r in store.front(study)} & above
    assert {r.trial for r in store.front(study, confirmed=False)} & above


def _old_study(url: str) -> None:
    """A study as poptune wrote it before: three parameters on every trial, ``skip`` clipped (on an embedded task:
    one stored before schema 2 on an lm-eval task is read, not resumed)."""
    from optuna.distributions import CategoricalDistribution, IntDistribution

    from poptune.engine import BOUNDARIES
    from poptune.objectives.base import References
    from poptune.tune.objective import outcome as _outcome

    problem = TuningProblem(model="tiny-llama", max_drop=None, tasks=("passkey",), lengths=(16,), decode_tokens=8)
    study = optuna.create_study(study_name="old", storage=url, directions=["minimize", "maximize"])
    study.set_user_attr("problem", problem.to_dict())
    study.set_user_attr("num_layers", LAYERS)
    study.set_user_attr("full_accuracy", {"passkey": 0.75})
    study.set_user_attr("reference_prefill_ms", 100.0)
    dists = {"skip": IntDistribution(0, LAYERS - 1), "boundary": CategoricalDistribution(list(BOUNDARIES)),
             "offset": IntDistribution(0, 2)}
    evaluator = FakeEvaluator(problem)
    for params, ran in [({"skip": 0, "boundary": "none", "offset": 1}, PopConfig(0)),
                        ({"skip": 5, "boundary": "last", "offset": 2}, PopConfig(3, "last", 2))]:
        m = evaluator.evaluate(ran)
        info = m.info()
        for key in ("null_check", "noisy", "provenance"):
            info.pop(key)  # not written then
        values, info, _ = _outcome(m, info, problem, References({"ttft": 100.0}))
        study.add_trial(optuna.trial.create_trial(params=params, distributions=dists, values=list(values),
                                                  user_attrs=info))


def test_old_studies_read_back_what_ran_and_resume(tmp_path):
    url = f"sqlite:///{tmp_path}/old.db"
    _old_study(url)
    study = store.load_study(store.open_storage(url, heartbeat=None), "old")
    assert [config_of_trial(t, LAYERS) for t in store.completed(study)] == [PopConfig(0), PopConfig(3, "last", 2)]
    assert {(r.skip, r.offset) for r in store.front(study)} <= {(0, 0), (3, 2)}
    problem = TuningProblem.from_dict(study.user_attrs["problem"])
    resumed = run_study(StudySpec(problem=problem, add=3, sampler="tpe", storage=url, study="old"),
                        evaluator=FakeEvaluator(problem))
    configs = [config_of_trial(t, LAYERS) for t in _measuring(resumed)]
    assert len(configs) == 5 and len(set(configs)) == 5


def test_a_failed_closing_aa_check_retimes_the_certified_candidates_and_says_so(problem, tmp_path, monkeypatch):
    # The closing A/A check fails once: the certification's candidates are timed again, their figures marked,
    # a last A/A check follows, and the verdict line names the figures it reports.
    from dataclasses import replace

    from poptune.reports.study_report import StudyReport

    aa_calls = []

    def timed(evaluator, config, pairs, warmup, lengths=None):
        if config == PopConfig(skip=0):
            aa_calls.append(pairs)
            noisy = len(aa_calls) == 2  # start ok, end noisy, after the re-timing ok
            ratios = [0.42, 0.75, 0.90, 1.02, 1.08] if noisy else [1.0 + 0.001 * (i % 3 - 1) for i in range(5)]
            return {16: (pair([ratios[i % len(ratios)] for i in range(pairs)]), 1.0)}
        return {16: (pair([true(config)] * pairs), ideal(config))}

    monkeypatch.setattr("poptune.tune.trust._time", timed)
    certifying = replace(problem, max_drop=2.5, certify_candidates=1)
    study = run_study(StudySpec(problem=certifying, trials=6, sampler="random",
                                storage=f"sqlite:///{tmp_path}/s.db"), evaluator=FakeEvaluator(certifying))
    checks = study.user_attrs["null_checks"]
    assert [c["when"] for c in checks] == ["start", "end", "end, after re-timing"]
    assert [c["noisy"] for c in checks] == [False, True, False]
    certified = [str(c["trial"]) for c in study.user_attrs["certification"]["candidates"]]
    figures = study.user_attrs["confirmation"]["trials"]
    assert certified and all(figures[t].get("retimed") for t in certified)
    report = StudyReport.of(study)
    text = report.text()
    assert "A/A check at end, after re-timing" in text and "A/A check at start" in text
    # the verdict line, had the candidate been certified within, names the figures it reports
    from poptune.reports import certification as certreport

    row = replace(store.certified(study)[0], verdict="certified within")
    line = certreport.verdict_line([row], study.user_attrs["certification"], 2.5, report.stored.confirmations)
    assert line.endswith("(timed again after the closing A/A check failed)")


def test_a_spent_search_share_stops_the_search_only_once_the_front_holds_a_candidate(problem, tmp_path):
    """Issue 56: with its share of --time-budget spent, the search starts no more trials -- but not before the front
    holds a configuration to certify (the full model alone is none), or the run would end with nothing to decide."""
    spec = StudySpec(problem=problem, trials=6, sampler="structured", storage=f"sqlite:///{tmp_path}/s.db",
                     time_budget=1e-6, confirm=False)
    study = run_study(spec, evaluator=FakeEvaluator(problem))
    assert [config_of_trial(t, LAYERS) for t in store.completed(study)] == [PopConfig(skip=0), paper_default(LAYERS)]


@pytest.mark.parametrize("budget", [1e-6, None])
def test_a_spent_time_budget_stops_the_search_candidate_or_not_once_the_enqueued_two_are_measured(budget, tmp_path):
    """Issue 56: a search whose front holds no candidate stops anyway once another trial would overrun the time
    budget (less the closing checks' time), so that the run ends near its budget; the full model and the paper's
    rule are measured first all the same. Here no configuration can be a candidate (every drop is over 0.5 points);
    without a clock the search measures its 6 trials."""
    problem = TuningProblem(model="tiny-llama", max_drop=0.5, tasks=("piqa",), lengths=(16,), decode_tokens=8)
    spec = StudySpec(problem=problem, trials=6, sampler="structured", storage=f"sqlite:///{tmp_path}/s.db",
                     time_budget=budget, confirm=False)
    study = run_study(spec, evaluator=FakeEvaluator(problem))
    measured = [config_of_trial(t, LAYERS) for t in store.completed(study)]
    if budget is None:
        assert len(measured) == 6
    else:
        assert measured == [PopConfig(skip=0), paper_default(LAYERS)]


def test_a_planned_certification_keeps_the_opening_aa_checks_time_for_the_closing_one(problem, tmp_path,
                                                                                      monkeypatch):
    """The plan keeps 45 s (``CLOSING_S``) for the closing A/A check; on this machine it took 82 s, as the opening
    one had, and a 38-minute study ended 15 s over its budget. Where the opening check took longer, the
    certification's deadline keeps that much."""
    import time

    from poptune.tune import study as study_module
    from poptune.tune import trust

    monkeypatch.setattr(study_module, "CLOSING_S", 0.0)
    opened: list[float] = []
    check = trust.record_aa_check

    def slow_check(study, evaluator, when, *args, **kwargs):
        if when == "start":
            opened.append(time.monotonic())
            time.sleep(3.0)
        return check(study, evaluator, when, *args, **kwargs)

    monkeypatch.setattr(trust, "record_aa_check", slow_check)
    deadlines: list[float | None] = []
    monkeypatch.setattr(study_module, "certify_front", lambda *a, **k: deadlines.append(k["deadline"]) or {})
    work = study_module._work
    stops: list[float] = []
    monkeypatch.setattr(study_module, "_work", lambda *a: stops.append(a[-2]) or work(*a))  # stop_by, from the deadline
    spec = StudySpec(problem=problem, trials=2, storage=f"sqlite:///{tmp_path}/s.db", time_budget=3600.0)
    run_study(spec, evaluator=FakeEvaluator(problem))
    run_deadline = stops[0] + (1 - study_module.SEARCH_SHARE) * 3600.0
    (deadline,) = deadlines
    assert opened and deadline is not None and deadline <= run_deadline - 3.0  # less the opening check's 3 s
