"""poptune: benchmark and auto-tuning suite for Prefill-Only Pruning (POP) of LLMs and VLMs.

The public API is what this module exports (:data:`__all__`): the POP engine, model loading, the baselines, a
study objective's contract (:class:`Objective`, :class:`References`), the errors, and the product's jobs --
:func:`run_bench` (POP's speed against the full model), :func:`run_eval` (its accuracy), :func:`run_study` (the
search for the best configuration) and :func:`compare` (POP against the baselines on the same items, rebuilt into
a leaderboard by :func:`write_methods_board`). Every name is imported on first use (module ``__getattr__``), so
``import poptune`` and ``poptune --help`` load neither torch nor optuna. Inside the package, code imports the
defining module, never these names (``tests/test_layers.py``).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

#: Public name -> the module that defines it.
_EXPORTS: dict[str, str] = {
    **dict.fromkeys(["Baseline", "LayerRemoval", "build_baseline"], "poptune.baselines"),
    "CalibrationSpec": "poptune.kvfit.calibration",
    **dict.fromkeys(["PROFILES", "Profile", "compare", "methods_for"], "poptune.comparison.measure"),
    "write_methods_board": "poptune.comparison.board",
    "cache_dir": "poptune.cache",
    "BOUNDARIES": "poptune.boundary.registry",
    "PopConfig": "poptune.engine.config",
    **dict.fromkeys(["STAGES", "PopHandle", "apply_pop", "get_pop_config", "remove_pop", "stage"],
                    "poptune.engine.pop"),
    "KVFitSpec": "poptune.kvfit.fit",
    **dict.fromkeys(["attach_kv_maps", "detach_kv_maps", "prepare_kv"], "poptune.kvfit.prepare"),
    "KVMaps": "poptune.kv.maps",
    **dict.fromkeys(["Objective", "References"], "poptune.objectives.base"),
    **dict.fromkeys(["ConfigError", "DataError", "DeviceError", "InputError", "MeasurementError",
                     "ModelNotFoundError", "PoptuneError", "StorageError", "UnsupportedModelError"], "poptune.errors"),
    "load_config": "poptune.reports.export",
    **dict.fromkeys(["ImageSize", "ModelSpec", "image_prompt", "load_model", "max_positions", "model_names",
                     "resolve_model", "synthetic_image"], "poptune.models"),
    **dict.fromkeys(["chunk_bounds", "prefill_prompt"], "poptune.engine.segments"),
    **dict.fromkeys(["BenchSpec", "run_bench"], "poptune.measure.bench"),
    **dict.fromkeys(["EvalSpec", "run_eval"], "poptune.evaluate.suite"),
    **dict.fromkeys(["PromptRequest", "read_prompts"], "poptune.evaluate.prompts"),
    "changed_interval": "poptune.evaluate.changed",
    **dict.fromkeys(["judged_tasks", "likelihood_task"], "poptune.evaluate.judges"),
    "Interval": "poptune.interval",
    **dict.fromkeys(["StudySpec", "run_study"], "poptune.tune.study"),
    "TuningProblem": "poptune.problem.problem",
}

__all__ = sorted([*_EXPORTS, "__version__"])

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ imports on first use
    from poptune.baselines import Baseline, LayerRemoval, build_baseline
    from poptune.boundary.registry import BOUNDARIES
    from poptune.cache import cache_dir
    from poptune.comparison.board import write_methods_board
    from poptune.comparison.measure import PROFILES, Profile, compare, methods_for
    from poptune.engine.config import PopConfig
    from poptune.engine.pop import (
        STAGES,
        PopHandle,
        apply_pop,
        get_pop_config,
        remove_pop,
        stage,
    )
    from poptune.engine.segments import chunk_bounds, prefill_prompt
    from poptune.errors import (
        ConfigError,
        DataError,
        DeviceError,
        InputError,
        MeasurementError,
        ModelNotFoundError,
        PoptuneError,
        StorageError,
        UnsupportedModelError,
    )
    from poptune.evaluate.changed import changed_interval
    from poptune.evaluate.judges import judged_tasks, likelihood_task
    from poptune.evaluate.prompts import PromptRequest, read_prompts
    from poptune.evaluate.suite import EvalSpec, run_eval
    from poptune.interval import Interval
    from poptune.kv.maps import KVMaps
    from poptune.kvfit.calibration import CalibrationSpec
    from poptune.kvfit.fit import KVFitSpec
    from poptune.kvfit.prepare import attach_kv_maps, detach_kv_maps, prepare_kv
    from poptune.measure.bench import BenchSpec, run_bench
    from poptune.models import (
        ImageSize,
        ModelSpec,
        image_prompt,
        load_model,
        max_positions,
        model_names,
        resolve_model,
        synthetic_image,
    )
    from poptune.objectives.base import Objective, References
    from poptune.problem.problem import TuningProblem
    from poptune.reports.export import load_config
    from poptune.tune.study import StudySpec, run_study

    __version__: str


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from poptune.version import installed_version

        value = installed_version()
    elif name in _EXPORTS:
        value = getattr(import_module(_EXPORTS[name]), name)
    else:
        raise AttributeError(f"module 'poptune' has no attribute {name!r}")
    globals()[name] = value  # once imported, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
