"""Where a tuning problem's configurations run: the runtime contract, poptune's engine, and the registry.

A runtime does the two things a study asks of an engine: time a configuration's prefill against the full model's
(a :class:`~poptune.measure.benchrecord.BenchResult`), and score a configuration on given items (a
:class:`~poptune.evaluate.suite.TaskRun`). Its name is in every verdict and record of a study that used it
(``TuningProblem.runtime``), and the full model's remembered answers are keyed by it, so a certificate says which
engine produced it. Adding a runtime is one module and one line of :data:`RUNTIMES`.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

from poptune.errors import ConfigError

if TYPE_CHECKING:
    from poptune.engine import PopConfig
    from poptune.evaluate.suite import EvalSpec, TaskRun
    from poptune.measure.benchrecord import BenchResult, BenchSpec
    from poptune.transform import Transform

__all__ = ["RUNTIMES", "HFRuntime", "Runtime", "check", "make"]

#: The runtimes by name: where each one's implementation lives (imported when a study uses it).
RUNTIMES: dict[str, str] = {
    "hf": "poptune.problem.runtime:HFRuntime",
    "vllm": "poptune.problem.vllm_runtime:VllmRuntime",
}


class Runtime(ABC):
    """The engine a tuning problem's configurations are timed and scored on.

    Args:
        problem: The problem (model, lengths, tasks) it serves.
    """

    name: str = ""

    def __init__(self, problem: Any) -> None:
        self.problem = problem

    @classmethod
    def check(cls, problem: Any) -> None:
        """Raise :class:`~poptune.errors.ConfigError` for a problem this runtime cannot run (default: any runs)."""
        return None

    @abstractmethod
    def bench(self, model: Any, tokenizer: Any, config: "PopConfig", spec: "BenchSpec", *,
              transform: "Transform | None" = None) -> "BenchResult":
        """Time ``config`` against the full model at ``spec``'s lengths (``model``: the problem's loaded model,
        which poptune's engine runs and another runtime may only read)."""

    @abstractmethod
    def score(self, model: Any, tokenizer: Any, config: "PopConfig", spec: "EvalSpec") -> "TaskRun":
        """``config``'s run on ``spec``'s items (``spec.samples``), every item's outcome kept."""

    def close(self) -> None:
        """Release what the runtime started (default: nothing)."""
        return None


class HFRuntime(Runtime):
    """poptune's own engine on the loaded Hugging Face model (:mod:`poptune.engine`)."""

    name = "hf"

    def bench(self, model: Any, tokenizer: Any, config: "PopConfig", spec: "BenchSpec", *,
              transform: "Transform | None" = None) -> "BenchResult":
        from poptune.measure.bench import run_bench

        p = self.problem
        return run_bench(model, tokenizer, config, spec, model_name=p.model, transform=transform, weights=p.weights)

    def score(self, model: Any, tokenizer: Any, config: "PopConfig", spec: "EvalSpec") -> "TaskRun":
        from poptune.evaluate.suite import measure_tasks

        return measure_tasks(model, tokenizer, config, spec)


def _class(name: str) -> type[Runtime]:
    if name not in RUNTIMES:
        raise ConfigError(f"`runtime` must be one of {', '.join(RUNTIMES)}, got {name!r}")
    module, attribute = RUNTIMES[name].split(":")
    found: type[Runtime] = getattr(importlib.import_module(module), attribute)
    return found


def check(problem: Any) -> None:
    """Raise :class:`~poptune.errors.ConfigError` for an unknown runtime or a problem it cannot run."""
    _class(problem.runtime).check(problem)


def make(problem: Any) -> Runtime:
    """The runtime ``problem.runtime`` names, for ``problem``."""
    return _class(problem.runtime)(problem)
