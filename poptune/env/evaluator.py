"""The one place that evaluates a configuration: latency beside the full model, then accuracy.

The model loads once, on first use. The full model's accuracy is measured once and reused for every
configuration (it can also be handed in, e.g. from a resumed study). Latency is always measured as
interleaved POP/full pairs, because a speedup from timings taken minutes apart on a shared machine would
measure the machine, not POP.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from poptune.baselines.surgery import Transform, applied
from poptune.engine import PopConfig, decoder_of
from poptune.env.problem import Measurement, TuningProblem

if TYPE_CHECKING:
    from poptune.baselines import Baseline

__all__ = ["ConfigEvaluator"]


class ConfigEvaluator:
    """Measures configurations of one :class:`TuningProblem` on this machine.

    Args:
        problem: What to measure.
        full_accuracy: The full model's per-task accuracy if already known (skips measuring it).
        model: An already loaded ``(model, tokenizer)`` (for tests; default: load ``problem.model``).
    """

    def __init__(
        self,
        problem: TuningProblem,
        *,
        full_accuracy: dict[str, float] | None = None,
        model: tuple[Any, Any] | None = None,
    ) -> None:
        self.problem = problem
        self._loaded = model
        self._full_accuracy = dict(full_accuracy) if full_accuracy else None
        self._full_items: dict[str, int] = {}
        self._image_length: int | None = None

    @property
    def model(self) -> Any:
        return self._load()[0]

    @property
    def tokenizer(self) -> Any:
        return self._load()[1]

    def _load(self) -> tuple[Any, Any]:
        if self._loaded is None:
            from poptune.models import load_model

            p = self.problem
            self._loaded = load_model(p.model, device=p.device, dtype=p.dtype, weights=p.weights)
        return self._loaded

    @property
    def num_layers(self) -> int:
        return len(decoder_of(self.model).layers)

    @property
    def target_length(self) -> int:
        """Tokens of the prompt whose prefill latency is the objective (built once for an image problem)."""
        if self.problem.image is None:
            return self.problem.target
        if self._image_length is None:
            from poptune.measure.prompts import image_prompt_batch
            from poptune.models.vision import ImageSize, kept_rope_state

            with kept_rope_state(self.model):
                inputs = image_prompt_batch(self.model, self.tokenizer, ImageSize.parse(self.problem.image))
            self._image_length = int(inputs["input_ids"].shape[1])
        return self._image_length

    def _eval_spec(self) -> Any:
        from poptune.evaluate.suite import EvalSpec

        p = self.problem
        return EvalSpec(tasks=p.tasks, data_dir=p.data_path(), limit=p.limit, batch_size=p.eval_batch_size,
                        fidelity=None, seed=p.seed)

    def _accuracy(self, config: PopConfig) -> tuple[dict[str, float], dict[str, int]]:
        from poptune.evaluate.suite import measure_tasks, primary

        scores, items, _ = measure_tasks(self.model, self.tokenizer, config, self._eval_spec())
        return primary(scores), items

    def set_full_accuracy(self, accuracy: dict[str, float]) -> None:
        """Reuse the full model's accuracy measured earlier (e.g. stored with a resumed study)."""
        self._full_accuracy = dict(accuracy)

    def full_accuracy(self) -> dict[str, float]:
        """The full model's accuracy per task, measured on first use."""
        if self._full_accuracy is None:
            self._full_accuracy, self._full_items = self._accuracy(PopConfig(skip=0))
        return self._full_accuracy

    def evaluate(
        self,
        config: PopConfig,
        *,
        transform: Transform | None = None,
        method: str = "pop",
        details: dict[str, Any] | None = None,
    ) -> Measurement:
        """Measure ``config``: prefill (and decode) latency against the full model, then task accuracy.

        Args:
            config: The POP configuration (``skip=0`` for none).
            transform: A baseline's model change, applied for the measured side's latency and its accuracy.
            method: ``pop`` or the baseline's name; ``details``: what the baseline is (stored with it).
        """
        from poptune.measure import RepeatPolicy
        from poptune.measure.bench import BenchSpec, run_bench
        from poptune.models.vision import ImageSize

        p = self.problem
        with applied(self.model, transform):
            config.check(self.num_layers)
        spec = BenchSpec(
            lengths=p.lengths,
            batch_size=p.batch_size,
            decode_tokens=p.decode_tokens,
            policy=RepeatPolicy(warmup=1, min_repeats=p.repeats, min_seconds=0.0, precision=p.precision,
                                max_repeats=p.max_pairs, max_seconds=p.max_seconds),
            images=(ImageSize.parse(p.image),) if p.image is not None else (),
            null_check=False,  # the study times its A/A pairs once per run (poptune.tune)
        )
        bench = run_bench(self.model, self.tokenizer, config, spec, model_name=p.model, transform=transform,
                          weights=p.weights)
        latency = {row.length: row.summary() for row in bench.rows}
        full = self.full_accuracy()
        if config.skip == 0 and transform is None:
            accuracy, items = dict(full), dict(self._full_items)
        else:
            with applied(self.model, transform):
                accuracy, items = self._accuracy(config)
        return Measurement(
            config=config,
            method=method,
            details=dict(details or {}),
            latency=latency,
            target_length=self.target_length,
            accuracy=accuracy,
            full_accuracy=full,
            energy_j=bench.telemetry.get("energy_j"),
            hardware=bench.hardware.to_dict(),
            versions=bench.versions,
            items=items,
            null_check=bench.null_check.to_dict() if bench.null_check else {},
            provenance=bench.provenance,
        )

    def evaluate_baseline(self, baseline: "Baseline") -> Measurement:
        """Measure a baseline exactly as a POP configuration: same prompts, lengths, tasks and timer."""
        return self.evaluate(baseline.pop, transform=baseline.transform, method=baseline.method,
                             details=baseline.describe())
