"""One accuracy measurement of a POP configuration beside the full model: tasks, synthetic tasks, fidelity.

Real tasks run through lm-eval with :class:`~poptune.evaluate.lm.PopLM`; ``--limit N`` takes N items at evenly
spaced indices of each task (``round(i * total / N)``, the same items every run), not the first N and not a
random draw. ``embedded`` needs no data at all: synthetic passkey and key-value recall tasks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from poptune.engine import PopConfig, apply_pop, remove_pop
from poptune.errors import ConfigError
from poptune.evaluate.fidelity import FidelityResult, FidelitySpec, fidelity_pairs, generated_text, measure_fidelity
from poptune.evaluate.fidelity import wikitext
from poptune.evaluate.taskpack import GROUPS, SHORT_TASKS, TASKS, expand

__all__ = [
    "EMBEDDED", "LOWER_IS_BETTER", "PRIMARY_METRIC", "EvalSpec", "EvalResult", "item_indices", "measure_tasks",
    "primary", "run_eval", "resolve_tasks",
]

log = logging.getLogger(__name__)

#: The synthetic task group that runs without any data.
EMBEDDED = ("passkey", "kv_recall")

#: The metric each task's accuracy is read from: length-normalised where lm-eval reports it (the usual
#: convention for HellaSwag and ARC), plain accuracy otherwise.
PRIMARY_METRIC = {
    "piqa": "acc_norm",
    "arc_easy": "acc_norm",
    "arc_challenge": "acc_norm",
    "hellaswag": "acc_norm",
    "winogrande": "acc",
    "boolq": "acc",
    "passkey": "acc",
    "kv_recall": "acc",
    # Long prompts: generation scored by the task's own metric; QASPER by the likelier choice.
    "longctx_squad": "f1",
    "longctx_drop": "f1",
    "longctx_coqa": "f1",
    "longctx_gsm8k": "exact_match",
    "longctx_qasper": "acc",
    # The gold continuation's bits per byte.
    "longctx_squad_bpb": "bpb",
    "longctx_drop_bpb": "bpb",
    "longctx_coqa_bpb": "bpb",
    "longctx_gsm8k_bpb": "bpb",
}

#: Metrics where a lower value is better (every other metric: higher is better).
LOWER_IS_BETTER = frozenset({"bpb"})

# The per-task metrics read from lm-eval's results (stderr entries and other keys are dropped).
_LM_EVAL_METRICS = ("acc", "acc_norm", "em", "f1", "exact_match", "bpb")


def resolve_tasks(text: str | None, data_dir: Path | None) -> tuple[str, ...]:
    """``"piqa,boolq"``, ``"longctx"``, ``"embedded"``, or None (the six short tasks with a data directory, else
    embedded). The groups ``longctx`` and ``longctx_bpb`` stand for the long-prompt tasks (``taskpack.GROUPS``).
    """
    if text is None:
        return SHORT_TASKS if data_dir is not None else EMBEDDED
    names: list[str] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        names.extend(EMBEDDED if part == "embedded" else expand([part]))
    unknown = [n for n in names if n not in TASKS and n not in EMBEDDED]
    if unknown or not names:
        raise ConfigError(
            f"unknown task(s) {', '.join(unknown) or '(none given)'}: use {', '.join(TASKS)}, "
            f"{', '.join(EMBEDDED)}, embedded or a group ({', '.join(GROUPS)})"
        )
    if any(n in TASKS for n in names) and data_dir is None:
        raise ConfigError("real tasks need a data directory: pass --data-dir or set POPTUNE_DATA")
    return tuple(dict.fromkeys(names))


def item_indices(total: int, limit: int | None) -> list[int]:
    """Evenly spaced item indices, ``round(i * total / limit)``: a fixed subset spanning the whole set."""
    if limit is None or limit >= total:
        return list(range(total))
    return sorted({min(total - 1, round(i * total / limit)) for i in range(limit)})


@dataclass(frozen=True)
class EvalSpec:
    """What one evaluation measures.

    Attributes:
        tasks: Real task names and/or synthetic ones (``passkey``, ``kv_recall``).
        data_dir: Where the real task files are (None: only synthetic tasks, fidelity on generated text).
        limit: Items per task (None: all), chosen by :func:`item_indices`.
        batch_size: Contexts prefilled together.
        fidelity: Text pairs for the fidelity figures (None: skip them).
        synthetic_lengths: Prompt lengths of the passkey task.
        seed: Seed of the synthetic tasks and of generated fidelity text.
    """

    tasks: tuple[str, ...]
    data_dir: Path | None = None
    limit: int | None = None
    batch_size: int = 8
    fidelity: FidelitySpec | None = field(default_factory=lambda: FidelitySpec(pairs=8))
    synthetic_lengths: tuple[int, ...] = (256, 1024)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.limit is not None and (isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1):
            raise ConfigError(f"`limit` must be a positive integer, got {self.limit!r}")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ConfigError(f"`batch_size` must be a positive integer, got {self.batch_size!r}")


@dataclass
class EvalResult:
    """Accuracy of a configuration and of the full model per task, with fidelity figures."""

    config: PopConfig
    scores: dict[str, dict[str, dict[str, float]]]  # task -> {"full": {metric: value}, "pop": {...}}
    items: dict[str, int]
    fidelity: FidelityResult | None
    details: dict[str, Any] = field(default_factory=dict)

    def accuracy(self, which: str) -> dict[str, float]:
        """Primary-metric accuracy per task (in [0, 1]) for ``"full"`` or ``"pop"``."""
        return primary({task: s[which] for task, s in self.scores.items()})

    def mean(self, which: str) -> float:
        values = list(self.accuracy(which).values())
        return sum(values) / len(values)

    @property
    def drop(self) -> float:
        """Mean accuracy drop in points (full minus POP, x100)."""
        return 100 * (self.mean("full") - self.mean("pop"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "primary_metric": {task: PRIMARY_METRIC[task] for task in self.scores},
            "scores": self.scores,
            "items": self.items,
            "mean_full": self.mean("full"),
            "mean_pop": self.mean("pop"),
            "drop_points": self.drop,
            "fidelity": self.fidelity.to_dict() if self.fidelity else None,
            **self.details,
        }

    def table(self) -> str:
        lines = [f"{'task':<14} {'metric':<8} {'items':>6} {'full':>7} {'POP':>7} {'drop':>7}"]
        for task, s in self.scores.items():
            metric = PRIMARY_METRIC[task]
            full, pop = 100 * s["full"][metric], 100 * s["pop"][metric]
            lines.append(f"{task:<14} {metric:<8} {self.items[task]:>6} {full:>7.2f} {pop:>7.2f} {full - pop:>+7.2f}")
        lines.append(
            f"{'mean':<14} {'':<8} {'':>6} {100 * self.mean('full'):>7.2f} {100 * self.mean('pop'):>7.2f} "
            f"{self.drop:>+7.2f}"
        )
        return "\n".join(lines)


def _lm_eval_scores(
    model: Any, tokenizer: Any, config: PopConfig, tasks: Sequence[str], spec: EvalSpec
) -> tuple[dict[str, dict[str, float]], dict[str, int]]:
    import lm_eval.evaluator

    from poptune.evaluate.lm import PopLM
    from poptune.evaluate.taskpack import get_task_dict

    task_dict = get_task_dict(tasks, spec.data_dir)
    samples = {name: item_indices(len(task.eval_docs), spec.limit) for name, task in task_dict["tasks"].items()}
    lm = PopLM(pretrained=model, tokenizer=tokenizer, skip=config.skip, boundary=config.boundary,
               offset=config.offset, layers=config.layers, batch_size=spec.batch_size)
    try:
        out = lm_eval.evaluator.evaluate(lm, task_dict, samples=samples, bootstrap_iters=0, log_samples=False,
                                         verbosity="WARNING")
    finally:
        remove_pop(model)
    scores = {}
    for name in tasks:
        metrics = out["results"][name]
        scores[name] = {key.split(",")[0]: float(v) for key, v in metrics.items()
                        if key.split(",")[0] in _LM_EVAL_METRICS and isinstance(v, (int, float))}
    return scores, {name: len(samples[name]) for name in tasks}


def _synthetic_scores(
    model: Any, tokenizer: Any, config: PopConfig | None, tasks: Sequence[str], spec: EvalSpec
) -> tuple[dict[str, dict[str, float]], dict[str, int], dict[str, Any]]:
    from poptune.evaluate.synthetic import kv_recall_items, passkey_items, run_synthetic

    items = []
    if "passkey" in tasks:
        items += passkey_items(tokenizer, lengths=spec.synthetic_lengths, per_cell=2, seed=spec.seed)
    if "kv_recall" in tasks:
        items += kv_recall_items(tokenizer, num_pairs=(8, 32), per_cell=5, seed=spec.seed)
    if config is not None:
        apply_pop(model, config)
    try:
        result = run_synthetic(model, tokenizer, items, batch_size=spec.batch_size)
    finally:
        remove_pop(model)
    scores = {task: {"acc": acc} for task, acc in result.accuracy.items()}
    counts = {task: sum(1 for r in result.records if r["task"] == task) for task in scores}
    breakdown = {task: result.breakdown(task) for task in scores}
    return scores, counts, breakdown


def measure_tasks(
    model: Any, tokenizer: Any, config: PopConfig, spec: EvalSpec
) -> tuple[dict[str, dict[str, float]], dict[str, int], dict[str, Any]]:
    """Scores of one configuration on ``spec``'s tasks: ``({task: {metric: value}}, {task: items}, details)``."""
    real = [t for t in spec.tasks if t in TASKS]
    synthetic = [t for t in spec.tasks if t in EMBEDDED]
    scores: dict[str, dict[str, float]] = {}
    items: dict[str, int] = {}
    details: dict[str, Any] = {}
    if real:
        found, counts = _lm_eval_scores(model, tokenizer, config, real, spec)
        scores.update(found)
        items.update(counts)
    if synthetic:
        found, counts, breakdown = _synthetic_scores(model, tokenizer, config, synthetic, spec)
        scores.update(found)
        items.update(counts)
        details["synthetic_breakdown"] = breakdown
    return scores, items, details


def primary(scores: dict[str, dict[str, float]]) -> dict[str, float]:
    """Each task's primary metric (:data:`PRIMARY_METRIC`)."""
    return {task: metrics[PRIMARY_METRIC[task]] for task, metrics in scores.items()}


def run_eval(
    model: Any,
    tokenizer: Any,
    config: PopConfig,
    spec: EvalSpec,
    *,
    progress: Callable[[str], None] | None = None,
) -> EvalResult:
    """Measure ``config`` and the full model on ``spec``'s tasks, then fidelity; the model is left plain."""
    scores: dict[str, dict[str, dict[str, float]]] = {}
    items: dict[str, int] = {}
    details: dict[str, Any] = {}
    for which, cfg in (("full", PopConfig(skip=0)), ("pop", config)):
        found, items, extra = measure_tasks(model, tokenizer, cfg, spec)
        for task, metrics in found.items():
            scores.setdefault(task, {})[which] = metrics
        for key, value in extra.items():
            details.setdefault(key, {})[which] = value
        if progress:
            progress(f"tasks ({which})")
    fidelity = None
    if spec.fidelity is not None:
        if spec.data_dir is not None:
            text, source = wikitext(spec.data_dir), "wikitext-2 test"
        else:
            needed = spec.fidelity.pairs * (spec.fidelity.context_tokens + spec.fidelity.continuation_tokens)
            text, source = generated_text(model, tokenizer, needed, seed=spec.seed), "text generated by the full model"
        pairs = fidelity_pairs(tokenizer, text, spec.fidelity)
        fidelity = measure_fidelity(model, tokenizer, config, pairs, source=source)
        if progress:
            progress("fidelity")
    return EvalResult(config=config, scores=scores, items=items, fidelity=fidelity, details=details)
