"""What makes a study's latencies trustworthy: provenance, A/A checks, re-measuring noisy trials, confirmation.

- :func:`record_run` appends each run's provenance (command line, version, git commit, weights, attention,
  dtype, threads, load at start and end) to the study attribute ``runs``.
- :func:`record_aa_check` times the full model against itself at the target prompt (16 A/A pairs, about 10 s at
  512 tokens on a 2-core CPU) and appends the figures of their equivalence test (within 1 +- 5%, see
  :mod:`poptune.measure.nullcheck`) to the study attribute ``null_checks`` (each run does so at its start and
  its end); equivalence not shown flags the run as noisy.
- :func:`remeasure_noisy` times again each configuration whose every trial is marked ``noisy`` (see
  :mod:`poptune.measure.nullcheck`); the new measurement is a trial of its own with ``remeasure_of``.
- :func:`confirm_front` re-times the front's configurations (or, when the study certifies, the certification's
  candidates) together, round by round (each round times every
  configuration once, so load that comes and goes hits them alike), with more pairs than a trial (4 rounds of
  4 pairs: whole A-B/B-A blocks, 16 pairs whose 95% interval is ``[x_(4), x_(13)]``, coverage 0.979); the figures
  go to the study attribute ``confirmation`` (Optuna does not let a finished trial's attributes change), which
  :func:`poptune.store.front.front` reads: the front is recomputed from them.
- :func:`retime_certified` runs when the closing A/A check fails: the certification's candidates are timed once
  more (a confirmation round set of their own), their confirmed figures replaced and marked ``retimed``, and a
  last A/A check says whether the machine was quiet for it; the verdict line says which figures it reports.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from poptune import progress, store
from poptune.engine import PopConfig
from poptune.measure.nullcheck import AA_PAIRS, aa_figures, aa_reasons, above_ideal
from poptune.measure.provenance import now
from poptune.store.front import candidates
from poptune.store.trials import StoredTrial
from poptune.tune.objective import add_finished_trial, outcome
from poptune.tune.params import config_of_trial

if TYPE_CHECKING:
    import optuna

    from poptune.measure.records import PairRecord
    from poptune.problem.evaluator import ConfigEvaluator

__all__ = ["CONFIRM_ROUNDS", "CONFIRM_PAIRS", "now", "record_run", "finish_run", "record_aa_check", "remeasure_noisy",
           "confirm_front", "retime_certified"]

log = logging.getLogger(__name__)

#: Rounds of the confirmation pass and pairs per configuration per round: an even number of pairs a round, so
#: every round is whole A-B/B-A blocks, and 16 pairs in all (>= MIN_PAIRS_95; 15 before, in rounds of 5).
CONFIRM_ROUNDS = 4
CONFIRM_PAIRS = 4




def _time(evaluator: "ConfigEvaluator", config: PopConfig, pairs: int, warmup: int,
          lengths: tuple[int, ...] | None = None) -> dict[int, tuple["PairRecord", float]]:
    """Prefill pair records of ``config`` against the full model and its ideal, per timed prompt length
    (default: the problem's target prompt)."""
    from poptune.measure import RepeatPolicy
    from poptune.measure.bench import BenchSpec
    from poptune.models.vision import ImageSize

    p = evaluator.problem
    spec = BenchSpec(lengths=lengths or (p.target,), decode_tokens=0, null_check=False,
                     images=(ImageSize.parse(p.image),) if p.image is not None else (),
                     policy=RepeatPolicy(warmup=warmup, min_repeats=pairs, max_repeats=pairs, min_seconds=0.0))
    evaluator.prepare_kv(config)  # a calibrated configuration measured by an earlier run: its maps (cached)
    rows = evaluator.runtime.bench(evaluator.model, evaluator.tokenizer, config, spec).rows
    return {row.length: (row.prefill, row.ideal) for row in rows}


def record_aa_check(study: "optuna.Study", evaluator: "ConfigEvaluator", when: str) -> dict[str, Any]:
    """Time :data:`~poptune.measure.nullcheck.AA_PAIRS` A/A pairs (full against full), test their equivalence
    and append the figures to the study's ``null_checks``; returns the entry.

    The entry holds the median ratio (``speedup``), the test's 90% interval (``lo``, ``hi``, ``confidence``,
    ``coverage``), ``pairs``, ``margin``, ``equivalent``, and ``noisy`` (equivalence not shown) with its reasons.
    """
    from poptune.measure.provenance import load_average

    p = evaluator.problem
    load_start = load_average()
    with progress.phase(f"A/A check at {when}", unit="pair"):
        pair, _ = next(iter(_time(evaluator, PopConfig(skip=0), AA_PAIRS, 1).values()))
    fig = aa_figures(pair)
    reasons = aa_reasons(f"A/A prefill at {p.target_label}", fig)
    entry = {"when": when, "date": now(), **fig, "noisy": bool(reasons), "reasons": reasons,
             "load_start": load_start, "load_end": load_average()}
    store.StoredStudy.of(study).add_null_check(entry)
    if reasons:
        log.warning("the machine was too noisy: %s", reasons[0])
    return entry


def record_run(study: "optuna.Study", evaluator: "ConfigEvaluator", started: str | None = None) -> None:
    """Append this run's provenance (:func:`poptune.measure.provenance.provenance`) to the study's ``runs``,
    with when it ``started`` (default: now; :func:`finish_run` adds when it finished)."""
    from poptune.measure.provenance import provenance

    p = evaluator.problem
    entry = dict(provenance(evaluator.model, model_name=p.model, weights=p.weights), date=now(),
                 started=started or now())
    store.StoredStudy.of(study).add_run(entry)


def finish_run(study: "optuna.Study") -> None:
    """Fill the load average and the time at the end of this run into its ``runs`` entry."""
    from poptune.measure.provenance import load_average

    stored = store.StoredStudy.of(study)
    runs = stored.runs
    if runs:
        runs[-1] = dict(runs[-1], load_end=load_average(), finished=now())
        stored.set_runs(runs)


def remeasure_noisy(study: "optuna.Study", evaluator: "ConfigEvaluator", *, attempts: int = 2) -> list[int]:
    """Time again every configuration all of whose trials are ``noisy``, up to ``attempts`` times each (its
    accuracy is kept: the items' outcomes do not depend on the machine's load).

    Returns the numbers of the trials timed again.
    """
    num_layers = evaluator.num_layers
    trials = [StoredTrial.of(t) for t in store.completed(study)]
    clean = {t.config for t in trials if not t.noisy}
    noisy: dict[PopConfig, int] = {}
    for t in trials:
        if t.noisy and t.config not in clean and t.reused_from is None:
            noisy.setdefault(t.config, t.number)
    references = store.StoredStudy.of(study).references
    for config, number in noisy.items():
        for _ in range(attempts):
            with progress.phase(f"re-timing trial {number} (a null check failed)", unit="step"):
                measurement = evaluator.retime(StoredTrial.of(study.trials[number]).measurement())
            values, info, constraint = outcome(measurement, measurement.info(), evaluator.problem, references)
            info.update(noisy=measurement.noisy, remeasure_of=number)
            add_finished_trial(study, values, info, constraint, config=config, num_layers=num_layers,
                               kv=evaluator.problem.kv)
            if not measurement.noisy:
                break
    return list(noisy.values())


def _merge(pairs: list["PairRecord"]) -> "PairRecord":
    from poptune.measure.records import LatencyRecord, PairRecord

    return PairRecord(a=LatencyRecord([v for p in pairs for v in p.a.values_ms]),
                      b=LatencyRecord([v for p in pairs for v in p.b.values_ms]),
                      order=[o for p in pairs for o in p.order], started=pairs[0].started)


def confirm_front(study: "optuna.Study", evaluator: "ConfigEvaluator", *, rounds: int = CONFIRM_ROUNDS,
                  pairs: int = CONFIRM_PAIRS, passes: int = 3) -> dict[str, Any]:
    """Re-time the front's configurations together, interleaved by rounds, and store the figures.

    Every configuration of the current front gets ``rounds * pairs`` pairs against the full model -- or, when
    the study certifies (:attr:`~poptune.problem.problem.TuningProblem.certifies`), only the certification's
    candidates (:func:`poptune.store.front.candidates`), the rows a verdict will be given for: on long prompts
    re-timing the whole front costs minutes the certification needs. The study attribute ``confirmation`` maps
    each confirmed trial's number to its figures (speedup, interval, pairs, ideal, whether it is above the
    ideal). When confirmed figures change the front or its candidates (a configuration confirmed slower, or
    above its ideal, lets another in), the newcomers are confirmed too, up to ``passes`` passes. Returns that
    attribute.
    """
    num_layers = evaluator.num_layers
    problem = evaluator.problem
    figures: dict[str, Any] = {}
    for _ in range(passes):
        rows = store.front(study)
        if problem.certifies:
            rows = candidates(rows, problem.max_drop, problem.certify_candidates)
        rows = [r for r in rows if r.method == "pop" and str(r.trial) not in figures]
        if not rows:
            break
        configs = _configs(study, [r.trial for r in rows], num_layers)
        with progress.phase(f"confirmation pass: {len(configs)} configurations x {rounds} rounds", unit="pair"):
            figures.update(_confirm(evaluator, configs, rounds, pairs, warmup=not figures))
        store.StoredStudy.of(study).set_confirmation({"date": now(), "rounds": rounds, "pairs_per_round": pairs,
                                                      "trials": figures})
    return store.StoredStudy.of(study).confirmation


def retime_certified(study: "optuna.Study", evaluator: "ConfigEvaluator", *, rounds: int = CONFIRM_ROUNDS,
                     pairs: int = CONFIRM_PAIRS) -> dict[str, Any]:
    """After a failed closing A/A check: time the certification's candidates once more, store their figures
    in place of the confirmation pass's (marked ``retimed``), and check the machine again (A/A ``end, after
    re-timing``). Returns the new figures by trial number."""
    record = store.StoredStudy.of(study).certification or {}
    numbers = [int(e["trial"]) for e in record.get("candidates", []) if e.get("verdict") != "not certified"]
    if not numbers:
        return {}
    configs = _configs(study, numbers, evaluator.num_layers)
    with progress.phase(f"re-timing {len(configs)} certified configurations (the closing A/A check failed)",
                        unit="pair"):
        figures = _confirm(evaluator, configs, rounds, pairs, warmup=True)
    for entry in figures.values():
        entry["retimed"] = now()
    stored = store.StoredStudy.of(study)
    confirmation = stored.confirmation
    confirmation["trials"] = {**confirmation.get("trials", {}), **figures}
    stored.set_confirmation(confirmation)
    record_aa_check(study, evaluator, "end, after re-timing")
    return figures


def _configs(study: "optuna.Study", numbers: list[int], num_layers: int) -> dict[int, PopConfig]:
    """The configurations the trials ``numbers`` measured (finished POP trials: each has one)."""
    configs = {n: config_of_trial(study.trials[n], num_layers) for n in numbers}
    missing = [n for n, c in configs.items() if c is None]
    assert not missing, f"trials {missing} have no configuration"
    return {n: c for n, c in configs.items() if c is not None}


def _confirm(evaluator: "ConfigEvaluator", configs: dict[int, PopConfig], rounds: int, pairs: int,
             warmup: bool) -> dict[str, Any]:
    """Confirmed figures of ``configs`` (trial number: configuration), timed round by round."""
    from poptune.store.measurement import weighted_ratio

    # A weighted workload's lengths with their weights, else the problem's target prompt (text or image) alone.
    weights = dict(evaluator.latency_points()) if evaluator.problem.weighted else {}
    timed: dict[int, dict[int, list[Any]]] = {number: {} for number in configs}
    ideal: dict[int, dict[int, float]] = {number: {} for number in configs}
    for round_ in range(rounds):
        for number, config in configs.items():  # one round times every configuration once
            rows = _time(evaluator, config, pairs, 1 if warmup and round_ == 0 else 0, tuple(weights) or None)
            for n, (pair, row_ideal) in rows.items():
                timed[number].setdefault(n, []).append(pair)
                ideal[number][n] = row_ideal
    weights = weights or {n: 1.0 for n in next(iter(timed.values()))}
    figures = {}
    for number, config in configs.items():
        merged = {n: _merge(timed[number][n]) for n in weights}
        latency = {n: {"full_ms": pair.b.p50, "speedup": pair.speedup, "speedup_lo": pair.speedup_ci.lo,
                       "speedup_hi": pair.speedup_ci.hi, "ideal": ideal[number][n]} for n, pair in merged.items()}
        lo, hi = (weighted_ratio(latency, weights, key) for key in ("speedup_lo", "speedup_hi"))
        best = weighted_ratio(latency, weights, "ideal")
        figures[str(number)] = {"config": config.to_dict(), "speedup": weighted_ratio(latency, weights),
                                "speedup_lo": lo, "speedup_hi": hi, "pairs": min(p.count for p in merged.values()),
                                "ideal": best, "above_ideal": above_ideal(lo, best),
                                "order": {str(n): p.order for n, p in merged.items()}}
    return figures
