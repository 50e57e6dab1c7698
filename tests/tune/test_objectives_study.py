"""Studies of other objectives than TTFT and accuracy: stored by name, one front on all of them, and read right."""

from __future__ import annotations

import dataclasses

import optuna
import pytest

from poptune import ConfigError, PopConfig, store
from poptune.env import TuningProblem
from poptune.objectives import registry
from poptune.reports.study_report import StudyReport
from poptune.tune.study import StudySpec, run_study

from .fakes import FakeEvaluator, quiet_timing  # noqa: F401  (the fixture is autouse: no real A/A pairs)

optuna.logging.set_verbosity(optuna.logging.WARNING)

THREE = ("ttft", "accuracy", "kv_bytes")


def kv_bytes(config: PopConfig) -> int:
    """A synthetic K/V cache that shrinks at offset 2, where the fake evaluator is a little slower and less
    accurate than at offset 0: a trade-off only a third objective sees."""
    return 4096 - 1024 * (config.offset == 2)


#: The full model and the paper's rule (2/last/0 of six layers) come first; then its offset-2 sibling.
TRADE = PopConfig(2, "last", 2)


class CacheEvaluator(FakeEvaluator):
    """The synthetic evaluator, its timing rows carrying each side's K/V cache bytes as the bench writes them."""

    def evaluate(self, config: PopConfig):
        measurement = super().evaluate(config)
        for row in measurement.latency.values():
            row.update(kv_bytes=kv_bytes(config), full_kv_bytes=4096)
        return measurement


def _problem(objectives=THREE, **kwargs) -> TuningProblem:
    return TuningProblem(model="tiny-llama", max_drop=None, tasks=("piqa",), lengths=(16,), decode_tokens=8,
                         objectives=objectives, **kwargs)


def _brute_front(rows, names):
    return {r.trial for r in rows if not any(registry.dominates(o.values, r.values, names) for o in rows)}


def test_a_three_objective_study_stores_its_objectives_and_ranks_on_all_of_them(tmp_path):
    url = f"sqlite:///{tmp_path}/s.db"
    study = run_study(StudySpec(problem=_problem(), trials=6, storage=url, sampler="random", seed=1,
                                enqueue=(TRADE,)), evaluator=CacheEvaluator(_problem()))
    assert study.directions == [optuna.study.StudyDirection.MINIMIZE, optuna.study.StudyDirection.MAXIMIZE,
                                optuna.study.StudyDirection.MINIMIZE]
    assert study.metric_names == ["prefill_ms@16", "accuracy", "kv_bytes@16"]
    stored = store.StoredStudy.of(study)
    assert stored.objectives == THREE and stored.problem["objectives"] == list(THREE)
    for trial in map(store.StoredTrial.of, store.completed(study)):
        values = registry.named(THREE, trial.values)
        assert values["kv_bytes"] == kv_bytes(trial.config)
        assert values["ttft"] == pytest.approx(stored.reference_ms / trial.speedup)
    front = store.front(study, confirmed=False)  # the trials' own figures, as the brute force below reads them
    everyone = [store.FrontRow.from_trial(t, None, None, THREE) for t in store.completed(study)
                if not store.StoredTrial.of(t).noisy and "reused_from" not in t.user_attrs]
    assert {r.trial for r in front} == _brute_front(everyone, THREE)
    on_two = _brute_front(everyone, registry.DEFAULT)
    assert {r.trial for r in front} >= on_two  # a third objective only adds trade-offs
    traded = next(r for r in front if r.config == TRADE)  # slower and less accurate than 2/last/0, a smaller cache
    assert traded.trial not in on_two and traded.values["kv_bytes"] == 3072


def test_the_report_shows_a_column_per_objective_and_labels_the_plot(tmp_path):
    url = f"sqlite:///{tmp_path}/s.db"
    study = run_study(StudySpec(problem=_problem(), trials=4, storage=url, sampler="random", seed=1,
                                enqueue=(TRADE,)), evaluator=CacheEvaluator(_problem()))
    report = StudyReport.of(study)
    text = report.text()
    header = next(line for line in text.splitlines() if line.lstrip().startswith("trial"))
    assert header.index("objective ms") < header.index("accuracy") < header.index("K/V MiB") < header.index("drop")
    assert "the front: Pareto-optimal on the study's objectives, ttft, accuracy, kv_bytes" in text
    assert "| K/V MiB |" in report.markdown()
    drawn = {}
    import poptune.plots

    def recording(points, front, path, **kwargs):
        drawn.update(points=points, front=front, **kwargs)
        return path

    real, poptune.plots.pareto_plot = poptune.plots.pareto_plot, recording
    try:
        report.plot(tmp_path / "p.png")
    finally:
        poptune.plots.pareto_plot = real
    assert all(", K/V MiB " in p.label for p in drawn["front"])
    assert "front on ttft, accuracy, kv_bytes" in drawn["title"]
    assert len(drawn["points"]) == len(report.trials)


def test_a_tpot_study_reads_decode_against_its_reference(tmp_path):
    problem = _problem(("ttft", "accuracy", "tpot"))
    study = run_study(StudySpec(problem=problem, trials=3, storage=f"sqlite:///{tmp_path}/s.db", sampler="random"),
                      evaluator=CacheEvaluator(problem))
    stored = store.StoredStudy.of(study)
    full = store.StoredTrial.of(store.completed(study)[0]).latency["16"]
    assert stored.references["tpot"] == full["decode_full_ms_per_token"]
    assert study.user_attrs["reference_tpot_ms"] == full["decode_full_ms_per_token"]  # the name stored before
    for trial in map(store.StoredTrial.of, store.completed(study)):
        row = trial.latency["16"]
        assert registry.named(problem.objectives, trial.values)["tpot"] == pytest.approx(
            stored.references["tpot"] / row["decode_speedup"])
    with pytest.raises(ConfigError, match="`decode_tokens` must be >= 1"):
        dataclasses.replace(problem, decode_tokens=0)


def test_a_study_resumes_only_with_its_objectives_and_refuses_the_structured_sampler_without_ttft(tmp_path):
    url = f"sqlite:///{tmp_path}/s.db"
    run_study(StudySpec(problem=_problem(), trials=2, storage=url, sampler="random"),
              evaluator=CacheEvaluator(_problem()))
    two = _problem(registry.DEFAULT)
    with pytest.raises(ConfigError, match=r"other settings \(objectives\)"):
        run_study(StudySpec(problem=two, trials=3, storage=url, sampler="random"), evaluator=CacheEvaluator(two))
    with pytest.raises(ConfigError, match="structured sampler searches by TTFT and accuracy"):
        StudySpec(problem=_problem(("accuracy", "kv_bytes")), sampler="structured")
    # A stored study without objective names (before they had them) reads as TTFT and accuracy.
    assert TuningProblem.from_dict({k: v for k, v in two.to_dict().items() if k != "objectives"}).objectives == \
        registry.DEFAULT


def test_an_export_of_a_three_objective_study_carries_every_objective(tmp_path):
    from poptune.reports.export import export_config

    url = f"sqlite:///{tmp_path}/s.db"
    study = run_study(StudySpec(problem=_problem(), trials=4, storage=url, sampler="random", seed=1,
                                enqueue=(TRADE,)), evaluator=CacheEvaluator(_problem()))
    data = export_config(url, study.study_name, max_drop=None)
    values = data["objectives"]["study_objectives"]
    assert set(values) == set(THREE)
    assert values["kv_bytes"] == kv_bytes(PopConfig.from_dict(data["pop_config"]))
    assert values["ttft"] == pytest.approx(data["objectives"]["prefill_ms"])


def test_the_study_prints_each_trial_with_its_third_objective(tmp_path):
    from poptune.cli.study import trial_line

    study = run_study(StudySpec(problem=_problem(), trials=2, storage=f"sqlite:///{tmp_path}/s.db",
                                sampler="random", seed=1), evaluator=CacheEvaluator(_problem()))
    trial = store.StoredTrial.of(store.completed(study)[0])
    assert f"K/V MiB {kv_bytes(trial.config) / 2 ** 20:.2f}" in trial_line(trial, THREE)
    assert "K/V MiB" not in trial_line(trial)  # a two-objective study's line is as it was
