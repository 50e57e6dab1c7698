"""A tuning problem run through vLLM with poptune's plugin (:mod:`poptune.serving`): the ``vllm`` runtime.

Two engines for the whole study, started on first use: the full model's, and one with the plugin that each
configuration is given in turn without a restart (:meth:`~poptune.serving.vllm_client.VllmEngine.configure`).
Timing is :func:`~poptune.measure.vllm_bench.run_vllm_bench` on them; scoring answers the embedded generation tasks
on the configuration's engine and grades them here (:func:`~poptune.evaluate.vllm_eval.answer_tasks`). What it
covers: the embedded generation tasks, text prompts, pretrained weights on the CPU, the paper's K/V source; no
baselines (their changed models run in poptune's engine only).
"""

from __future__ import annotations

import atexit
from typing import TYPE_CHECKING, Any

from poptune.errors import ConfigError
from poptune.problem.runtime import Runtime

if TYPE_CHECKING:
    from poptune.engine import PopConfig
    from poptune.evaluate.suite import EvalSpec, TaskRun
    from poptune.measure.benchrecord import BenchResult, BenchSpec
    from poptune.serving.vllm_client import VllmEngine
    from poptune.transform import Transform

__all__ = ["VllmRuntime"]

#: Positions each vLLM engine is made for beyond the longest timed prompt (the scored items' prompts and answers).
CONTEXT = 4096


class VllmRuntime(Runtime):
    """The ``vllm`` runtime: a study's configurations timed and scored by vLLM with poptune's plugin."""

    name = "vllm"

    def __init__(self, problem: Any) -> None:
        super().__init__(problem)
        self._engines: tuple[VllmEngine, VllmEngine] | None = None

    @classmethod
    def check(cls, problem: Any) -> None:
        from poptune.evaluate.suite import EMBEDDED
        from poptune.kv import registry

        other = [t for t in problem.tasks if t not in EMBEDDED]
        if other:
            raise ConfigError(f"the vLLM runtime scores the embedded generation tasks ({', '.join(EMBEDDED)}) only, "
                              f"not {', '.join(other)}")
        if problem.image is not None or problem.device != "cpu" or problem.weights != "pretrained":
            raise ConfigError("the vLLM runtime runs text prompts on vLLM's CPU build with the pretrained weights")
        if any(not registry.is_default(k) for k in problem.kv):
            raise ConfigError("the vLLM runtime serves the skipped layers' own K/V only (no --kv sources)")

    def _running(self) -> "tuple[VllmEngine, VllmEngine]":
        """``(pop, full)``: the engines, started once (the plugin's at skip 0 until a configuration is given)."""
        if self._engines is None:
            from poptune.measure.vllm_bench import engine_settings
            from poptune.models.registry import model_directory
            from poptune.serving.vllm_client import VllmEngine

            p = self.problem
            settings = engine_settings(p.lengths, p.batch_size) | {
                "max_model_len": max(CONTEXT, max(p.lengths) + 16)}
            directory = model_directory(p.model)
            pop = VllmEngine(directory, pop={"pop_config": {"skip": 0}}, engine=settings)
            try:
                full = VllmEngine(directory, engine=settings)
            except BaseException:
                pop.close()
                raise
            self._engines = (pop, full)
            atexit.register(self.close)
        return self._engines

    def bench(self, model: Any, tokenizer: Any, config: "PopConfig", spec: "BenchSpec", *,
              transform: "Transform | None" = None) -> "BenchResult":
        from poptune.measure.vllm_bench import run_vllm_bench
        from poptune.models.registry import model_directory

        if transform is not None:
            raise ConfigError("the vLLM runtime measures POP configurations only: baselines run in poptune's engine")
        return run_vllm_bench(model_directory(self.problem.model), tokenizer, config, spec,
                              model_name=self.problem.model, engines=self._running())

    def score(self, model: Any, tokenizer: Any, config: "PopConfig", spec: "EvalSpec") -> "TaskRun":
        from poptune.evaluate.vllm_eval import answer_tasks

        pop, full = self._running()
        if config.skip == 0:
            return answer_tasks(full, tokenizer, spec)[0]
        pop.configure(config.to_dict())
        return answer_tasks(pop, tokenizer, spec)[0]

    def close(self) -> None:
        if self._engines is not None:
            for engine in self._engines:
                engine.close()
            self._engines = None
