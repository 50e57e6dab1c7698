"""Accuracy under POP: stage-aware lm-eval scoring, offline task packs, synthetic context tasks, fidelity.

The public API is :data:`__all__`, imported on first use (module ``__getattr__``): most of these modules load
torch, and :mod:`~poptune.evaluate.lm` loads lm-eval, which ``import poptune.evaluate`` must not.

- :func:`run_eval` (:mod:`~poptune.evaluate.suite`): a configuration's accuracy beside the full model's, with
  paired intervals and fidelity -- what ``poptune eval`` runs; :func:`measure_tasks` scores one configuration.
- :mod:`~poptune.evaluate.workload`: the fixed item order a study's racing draws from.
- :mod:`~poptune.evaluate.judges`: a task pack judged by its full answer's likelihood (``--judge likelihood``).
- :mod:`~poptune.evaluate.racing`, :mod:`~poptune.evaluate.paired`: racing and paired accuracy drops.
- :mod:`~poptune.evaluate.fidelity`, :mod:`~poptune.evaluate.image_fidelity`: agreement with the full model.
- :mod:`~poptune.evaluate.synthetic`: passkey and key-value recall, generated without data.
- :mod:`~poptune.evaluate.taskpack`, :mod:`~poptune.evaluate.tasks`: the offline lm-eval task pack.
- :mod:`~poptune.evaluate.lm`, :mod:`~poptune.evaluate.scoring`: the lm-eval model and its scoring.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, str] = {
    **dict.fromkeys(["EMBEDDED", "LOWER_IS_BETTER", "PRIMARY_METRIC", "EvalResult", "EvalSpec", "TaskRun", "drop_of",
                     "measure_tasks", "resolve_tasks", "run_eval"], "suite"),
    **dict.fromkeys(["FidelityResult", "FidelitySpec", "measure_fidelity"], "fidelity"),
    "measure_image_fidelity": "image_fidelity",
    **dict.fromkeys(["LIKELIHOOD_TASKS", "judged_tasks", "likelihood_task"], "judges"),
    "PopLM": "lm",
    **dict.fromkeys(["PairedDrop", "paired_drop"], "paired"),
    **dict.fromkeys(["RaceResult", "RacingPolicy", "race"], "racing"),
    "score_continuations": "scoring",
    **dict.fromkeys(["SyntheticItem", "SyntheticResult", "kv_recall_items", "passkey_items", "run_synthetic"],
                    "synthetic"),
    **dict.fromkeys(["GROUPS", "SHORT_TASKS", "TASKS", "check_data", "get_task_dict"], "taskpack"),
    **dict.fromkeys(["Workload", "build_workload"], "workload"),
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from poptune.evaluate.fidelity import FidelityResult, FidelitySpec, measure_fidelity
    from poptune.evaluate.image_fidelity import measure_image_fidelity
    from poptune.evaluate.judges import LIKELIHOOD_TASKS, judged_tasks, likelihood_task
    from poptune.evaluate.lm import PopLM
    from poptune.evaluate.paired import PairedDrop, paired_drop
    from poptune.evaluate.racing import RaceResult, RacingPolicy, race
    from poptune.evaluate.scoring import score_continuations
    from poptune.evaluate.suite import (
        EMBEDDED,
        LOWER_IS_BETTER,
        PRIMARY_METRIC,
        EvalResult,
        EvalSpec,
        TaskRun,
        drop_of,
        measure_tasks,
        resolve_tasks,
        run_eval,
    )
    from poptune.evaluate.synthetic import SyntheticItem, SyntheticResult, kv_recall_items, passkey_items, run_synthetic
    from poptune.evaluate.taskpack import GROUPS, SHORT_TASKS, TASKS, check_data, get_task_dict
    from poptune.evaluate.workload import Workload, build_workload


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
