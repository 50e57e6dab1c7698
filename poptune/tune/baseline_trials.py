"""Baselines measured into a study beside POP, at the pruning ratios of POP's front and the paper's rule.

Each baseline is stored as a trial with a ``method`` user attribute and no search parameters, measured by the
same evaluator and ranked by the same objectives (:mod:`poptune.tune.objective`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from poptune import progress, store
from poptune.baselines.methods import method as baseline_method
from poptune.kvfit.calibration import CalibrationSpec
from poptune.problem.evaluator import ConfigEvaluator
from poptune.problem.space import paper_default
from poptune.store.measurement import Measurement
from poptune.store.trials import StoredTrial
from poptune.tune.objective import add_finished_trial, outcome, settle_reference

if TYPE_CHECKING:
    import optuna

__all__ = ["add_baselines", "front_ratios"]


def front_ratios(study: "optuna.Study", num_layers: int) -> list[float]:
    """The pruning ratios ``skip / L`` of POP's stored front (skip > 0) and of the paper's rule, smallest first."""
    skips = {row.skip for row in store.front(study) if row.skip} | {paper_default(num_layers).skip}
    return sorted(skip / num_layers for skip in skips)


def add_baselines(
    study: "optuna.Study",
    evaluator: ConfigEvaluator,
    methods: tuple[str, ...],
    *,
    ratios: list[float] | None = None,
    calibration: CalibrationSpec | None = None,
) -> list[Measurement]:
    """Measure baselines into ``study`` (default: the ratios of POP's front and paper rule; Wanda at 30%).

    A method already stored at the same number of layers (Wanda: the same sparsity) is not measured again.
    Returns the new measurements.
    """
    from poptune.baselines.methods import build_baseline

    problem = evaluator.problem
    num_layers = evaluator.num_layers
    ratios = front_ratios(study, num_layers) if ratios is None else ratios
    done = {(t.method, _amount(t.method, t.details["ratio"], num_layers))
            for t in map(StoredTrial.of, store.completed(study, method=None)) if not t.is_pop}
    measured = []
    memo: dict[str, Any] = {}
    for method in methods:
        for ratio in baseline_method(method).ratios(sorted(ratios, reverse=True)):
            key = (method, _amount(method, ratio, num_layers))
            if key in done:
                continue
            with progress.phase(f"baseline {method} at ratio {ratio:.3f}", unit="step"):
                measurement = evaluator.evaluate_baseline(
                    build_baseline(evaluator.model, evaluator.tokenizer, method, ratio, calibration, memo=memo))
            references = settle_reference(study, measurement)  # a study of baselines only: this one's full model
            add_finished_trial(study, *outcome(measurement, measurement.info(), problem, references))
            done.add(key)
            measured.append(measurement)
    return measured


def _amount(method: str, ratio: float, num_layers: int) -> float:
    """What identifies a baseline at a ratio: layers removed (Wanda: its sparsity)."""
    return baseline_method(method).amount(ratio, num_layers)
