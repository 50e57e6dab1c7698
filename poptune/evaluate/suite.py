"""One accuracy measurement of a POP configuration beside the full model: tasks, synthetic tasks, fidelity.

Real tasks run through lm-eval with :class:`~poptune.evaluate.lm.PopLM`; ``--limit N`` takes the first N items
of each task's fixed order (a seeded permutation: the same items every run, a uniform sample of the set), and an
item whose prompt does not fit the model's context is skipped and counted, never truncated. ``embedded`` needs
no data at all: synthetic passkey and key-value recall tasks. Every item's outcome is kept, so the drop of a
configuration is paired item by item with the full model's and carries a 95% interval
(:mod:`poptune.evaluate.paired`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from poptune import progress
from poptune.engine import PopConfig, apply_pop, remove_pop
from poptune.engine.segments import chunk_bounds
from poptune.errors import ConfigError
from poptune.evaluate.fidelity import (
    FidelityResult,
    FidelitySpec,
    fidelity_pairs,
    generated_text,
    measure_fidelity,
    wikitext,
)
from poptune.evaluate.judges import LIKELIHOOD_JUDGE, LIKELIHOOD_TASKS, base_task, check_one_judge, judge_of
from poptune.evaluate.paired import PairedDrop, paired_drop
from poptune.evaluate.prompts import LIKELIHOOD, PROMPT_TASKS, REFERENCES
from poptune.evaluate.synthetic import EMBEDDED, run_synthetic
from poptune.evaluate.taskpack import GROUPS, SHORT_TASKS, TASKS, expand
from poptune.evaluate.tasks import registry as pack_registry

__all__ = [
    "EMBEDDED", "LIKELIHOOD_ITEMS", "LOWER_IS_BETTER", "PRIMARY_METRIC", "EvalSpec", "EvalResult", "TaskRun",
    "drop_of", "harness_tasks", "item_indices",
    "measure_tasks", "primary", "run_eval", "resolve_tasks", "task_drops",
]

log = logging.getLogger(__name__)

#: The metric each task's accuracy is read from: the task pack's, as its registry says
#: (:mod:`poptune.evaluate.tasks.registry`: length-normalised where lm-eval reports it, the usual convention for
#: HellaSwag and ARC; plain accuracy otherwise; a long prompt's own metric; bits per byte), then the others'.
PRIMARY_METRIC = {
    **pack_registry.PRIMARY,
    "passkey": "acc",
    "kv_recall": "acc",
    "prompts": "unchanged",  # a user's prompts: the full model's greedy answer kept (poptune.evaluate.answers)
    REFERENCES: "reference",  # the same, judged on their reference answers
    LIKELIHOOD: "answer_prob",  # the same, judged on the full answer's mean token probability under POP's prefill
    # A generation task judged by likelihood (poptune.evaluate.judges): the full answer's mean token probability.
    **dict.fromkeys(LIKELIHOOD_TASKS, "answer_prob"),
}

#: Key of a run's per-item figures of its likelihood-judged tasks in ``TaskRun.details`` (task -> item -> figures:
#: :func:`poptune.evaluate.answers.score_requests`).
LIKELIHOOD_ITEMS = "likelihood_items"

#: Metrics where a lower value is better (every other metric: higher is better); their drop is POP minus full.
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


def task_names(tasks: Any) -> tuple[str, ...]:
    """``tasks`` of a spec given through the Python API as a tuple of known task names: one name alone (a string)
    is one task, not its letters (issue 87).

    Raises:
        ConfigError: a name that is not a string or not a task poptune scores (named, with the known ones listed),
            at once rather than in lm-eval after seconds of loading.
    """
    names = (tasks,) if isinstance(tasks, str) else tuple(tasks) if isinstance(tasks, (list, tuple)) else None
    if names is None:
        raise ConfigError(f"`tasks` must be task names (a tuple of strings, or one string), got {tasks!r}")
    check_one_judge([t for t in names if isinstance(t, str) and ":" in t])  # a judge a task cannot have, said so
    known = (*TASKS, *EMBEDDED, *LIKELIHOOD_TASKS, *PROMPT_TASKS)
    unknown = [repr(t) for t in names if not isinstance(t, str) or t not in known]
    if unknown:
        raise ConfigError(f"unknown task(s) {', '.join(unknown)}: use {', '.join(TASKS)}, {', '.join(EMBEDDED)} "
                          f"(or a `:likelihood` judge of {', '.join(t.split(':')[0] for t in LIKELIHOOD_TASKS)})")
    return names


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
        limit: Items per task (None: all; synthetic tasks: 20): :func:`run_eval` takes the first ``limit`` of
            each task's fixed order (:mod:`poptune.evaluate.workload`), :func:`measure_tasks` evenly spaced ones
            (:func:`item_indices`) when no ``samples`` are given.
        batch_size: Contexts prefilled together.
        fidelity: Text pairs for the fidelity figures (None: skip them).
        synthetic_lengths: Prompt lengths of the passkey task.
        seed: Seed of the synthetic tasks and of generated fidelity text.
        samples: Explicit item indices per task (a workload's order, see :mod:`poptune.evaluate.workload`);
            overrides ``limit``.
        prefill_chunk: Prefill every prompt in chunks of this many tokens (None: whole), the full model's too.
    """

    tasks: tuple[str, ...]
    data_dir: Path | None = None
    limit: int | None = None
    batch_size: int = 8
    fidelity: FidelitySpec | None = field(default_factory=lambda: FidelitySpec(pairs=8))
    synthetic_lengths: tuple[int, ...] = (256, 1024)
    seed: int = 0
    samples: Mapping[str, Sequence[int]] | None = None
    prefill_chunk: int | None = None
    prompts: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "tasks", task_names(self.tasks))
        chunk_bounds(2, self.prefill_chunk)  # validates it
        if self.limit is not None and (isinstance(self.limit, bool) or not isinstance(self.limit, int)
                                       or self.limit < 1):
            raise ConfigError(f"`limit` must be a positive integer, got {self.limit!r}")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ConfigError(f"`batch_size` must be a positive integer, got {self.batch_size!r}")
        if self.samples is not None and (set(self.samples) != set(self.tasks) or
                                         any(not list(v) for v in self.samples.values())):
            raise ConfigError(f"`samples` must give items for every task of {list(self.tasks)}")

    def with_samples(self, samples: Mapping[str, Sequence[int]]) -> "EvalSpec":
        """This spec on explicit items (only the tasks named in ``samples``)."""
        return replace(self, tasks=tuple(samples), samples={t: list(v) for t, v in samples.items()})


@dataclass
class TaskRun:
    """One configuration's scores on a set of items.

    Attributes:
        scores: Per task, every aggregate metric lm-eval (or the synthetic scorer) reports.
        items: Per task, the item indices scored, in order.
        outcomes: Per task, the primary metric of each item of ``items`` (same order): what paired drops
            are computed from.
        details: Extra figures (the synthetic tasks' breakdown by cell).
    """

    scores: dict[str, dict[str, float]]
    items: dict[str, list[int]]
    outcomes: dict[str, list[float]]
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def counts(self) -> dict[str, int]:
        return {task: len(v) for task, v in self.items.items()}

    def primary(self) -> dict[str, float]:
        """Each task's primary metric over the items scored."""
        return {task: sum(v) / len(v) for task, v in self.outcomes.items() if v}

    def head(self, counts: Mapping[str, int]) -> "TaskRun":
        """The first ``counts[task]`` items of each task (aggregates: the primary metric's mean)."""
        items = {t: self.items[t][:n] for t, n in counts.items()}
        outcomes = {t: self.outcomes[t][:n] for t, n in counts.items()}
        scores = {t: {PRIMARY_METRIC[t]: sum(v) / len(v)} for t, v in outcomes.items() if v}
        return TaskRun(scores, items, outcomes)

    def tail(self, start: int) -> "TaskRun":
        """The items from position ``start`` on of each task (aggregates: the primary metric's mean)."""
        if not start:
            return self
        items = {t: v[start:] for t, v in self.items.items()}
        outcomes = {t: v[start:] for t, v in self.outcomes.items()}
        scores = {t: {PRIMARY_METRIC[t]: sum(v) / len(v)} for t, v in outcomes.items() if v}
        return TaskRun(scores, items, outcomes)

    def to_dict(self) -> dict[str, Any]:
        return {"scores": self.scores, "items": self.items,
                "outcomes": {t: [round(v, 6) for v in vs] for t, vs in self.outcomes.items()}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "TaskRun":
        return cls(dict(data["scores"]), {t: list(v) for t, v in data["items"].items()},
                   {t: [float(x) for x in v] for t, v in data["outcomes"].items()})


@dataclass
class EvalResult:
    """Accuracy of a configuration and of the full model per task, the paired drop, and fidelity figures."""

    config: PopConfig
    scores: dict[str, dict[str, dict[str, float]]]  # task -> {"full": {metric: value}, "pop": {...}}
    items: dict[str, int]
    fidelity: FidelityResult | None
    details: dict[str, Any] = field(default_factory=dict)
    paired: PairedDrop | None = None
    task_drops: dict[str, PairedDrop] = field(default_factory=dict)

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
            "drop": self.paired.to_dict() if self.paired else None,
            "task_drops": {task: d.to_dict() for task, d in self.task_drops.items()},
            "fidelity": self.fidelity.to_dict() if self.fidelity else None,
            **self.details,
        }

    def table(self) -> str:
        """Per task: items, full, POP and the paired drop with its 95% interval (bits per byte: lower is better)."""
        lines = [f"{'task':<20} {'metric':<11} {'items':>5} {'full':>7} {'POP':>7} {'drop [95% CI]':>24}"]
        for task, s in self.scores.items():
            metric = PRIMARY_METRIC[task]
            scale = 1.0 if metric in LOWER_IS_BETTER else 100.0
            full, pop = scale * s["full"][metric], scale * s["pop"][metric]
            drop = self.task_drops.get(task)
            interval = f"{drop.mean:+7.2f} [{drop.lo:+6.2f}, {drop.hi:+6.2f}]" if drop else f"{full - pop:+7.2f}"
            lines.append(f"{task:<20} {metric:<11} {self.items[task]:>5} {full:>7.2f} {pop:>7.2f} {interval:>24}")
        likelihood = judge_of(list(self.scores)) == LIKELIHOOD_JUDGE
        if self.paired is not None:
            d = self.paired
            mean = "mean (likelihood)" if likelihood else "mean (accuracy)"
            lines.append(f"{mean:<20} {'':<11} {'':>5} {'':>7} {'':>7} "
                         f"{f'{d.mean:+7.2f} [{d.lo:+6.2f}, {d.hi:+6.2f}]':>24}")
        lines.append("drop = full - POP in points (bits per byte: POP - full), paired over the same items, "
                     "95% interval (the score test; bits per byte: a bootstrap); the mean is over the "
                     "higher-is-better tasks")
        if likelihood:
            lines.append("judged by likelihood: answer_prob = the mean probability of the full model's greedy answer "
                         "tokens under each side's prefill; its drop is not an accuracy drop")
        return "\n".join(lines)


def _lm_eval_scores(model: Any, tokenizer: Any, config: PopConfig, tasks: Sequence[str], spec: EvalSpec) -> TaskRun:
    import lm_eval.evaluator

    from poptune.evaluate.lm import PopLM
    from poptune.evaluate.taskpack import get_task_dict

    task_dict = get_task_dict(tasks, spec.data_dir)
    if spec.samples is not None:
        samples = {name: list(spec.samples[name]) for name in tasks}
    else:
        samples = {name: item_indices(len(task.eval_docs), spec.limit) for name, task in task_dict["tasks"].items()}
    with progress.others_hushed("lm_eval"):  # a study's bars count the requests instead, without lm-eval's notices
        lm = PopLM(pretrained=model, tokenizer=tokenizer, skip=config.skip, boundary=config.boundary,
                   offset=config.offset, layers=config.layers, kv=config.kv, batch_size=spec.batch_size,
                   prefill_chunk=spec.prefill_chunk)
        # lm-eval yields the chosen documents in the dataset's order and names the k-th the k-th of ``samples``:
        # asked in ascending order, every document keeps its own index (a study's items come shuffled)
        out = lm_eval.evaluator.evaluate(lm, task_dict, samples={t: sorted(set(v)) for t, v in samples.items()},
                                         bootstrap_iters=0, log_samples=True, verbosity="WARNING")
    scores, outcomes = {}, {}
    for name in tasks:
        metrics = out["results"][name]
        scores[name] = {key.split(",")[0]: float(v) for key, v in metrics.items()
                        if key.split(",")[0] in _LM_EVAL_METRICS and isinstance(v, (int, float))}
        per_doc = {int(s["doc_id"]): float(s[PRIMARY_METRIC[name]]) for s in out["samples"][name]}
        outcomes[name] = [per_doc[i] for i in samples[name]]
    return TaskRun(scores, samples, outcomes)


def _synthetic_scores(model: Any, tokenizer: Any, config: PopConfig | None, tasks: Sequence[str],
                      spec: EvalSpec) -> TaskRun:
    from poptune.evaluate.workload import synthetic_pool

    chosen: dict[str, list[int]] = {}
    items = []
    for task in tasks:
        chosen[task] = list(spec.samples[task]) if spec.samples is not None else list(range(spec.limit or 20))
        pool = synthetic_pool(tokenizer, task, max(chosen[task]) + 1, lengths=spec.synthetic_lengths, seed=spec.seed)
        items += [pool[i] for i in chosen[task]]
    if config is not None:
        apply_pop(model, config)
    try:
        result = run_synthetic(model, tokenizer, items, batch_size=spec.batch_size, prefill_chunk=spec.prefill_chunk)
    finally:
        remove_pop(model)
    scores = {task: {"acc": acc} for task, acc in result.accuracy.items()}
    outcomes = {task: [float(r["correct"]) for r in result.records if r["task"] == task] for task in tasks}
    return TaskRun(scores, chosen, outcomes, {"synthetic_breakdown": {t: result.breakdown(t) for t in tasks}})


def harness_tasks(tasks: Sequence[str]) -> list[str]:
    """The tasks of ``tasks`` that lm-eval scores (not the embedded, prompt or likelihood-judged ones)."""
    return [t for t in tasks if t not in EMBEDDED and t not in PROMPT_TASKS and t not in LIKELIHOOD_TASKS]


def measure_tasks(model: Any, tokenizer: Any, config: PopConfig, spec: EvalSpec) -> TaskRun:
    """Scores of one configuration on ``spec``'s tasks, with every item's outcome (a likelihood-judged task's items
    read as prompt requests, :mod:`poptune.evaluate.judges`; their figures in ``details[LIKELIHOOD_ITEMS]``)."""
    real = harness_tasks(spec.tasks)
    synthetic = [t for t in spec.tasks if t in EMBEDDED]
    run = TaskRun({}, {}, {})
    for task in (t for t in spec.tasks if t in LIKELIHOOD_TASKS):
        from poptune.evaluate.answers import ITEMS_KEY, score_requests
        from poptune.evaluate.workload import task_requests

        indices = list(spec.samples[task]) if spec.samples is not None else list(range(spec.limit or 20))
        requests = task_requests(tokenizer, task, indices, data_dir=spec.data_dir,
                                 synthetic_lengths=spec.synthetic_lengths, seed=spec.seed,
                                 metric=PRIMARY_METRIC[base_task(task)])
        found = score_requests(model, tokenizer, config, requests, indices, batch_size=spec.batch_size,
                               prefill_chunk=spec.prefill_chunk, task=LIKELIHOOD, name=task)
        run.scores.update(found.scores)
        run.items.update(found.items)
        run.outcomes.update(found.outcomes)
        run.details.setdefault(LIKELIHOOD_ITEMS, {})[task] = found.details[ITEMS_KEY]
    for task in (t for t in PROMPT_TASKS if t in spec.tasks):
        from poptune.evaluate.answers import score_prompts

        assert spec.prompts is not None, f"task `{task}` needs EvalSpec.prompts"
        indices = list(spec.samples[task]) if spec.samples is not None else list(range(spec.limit or 20))
        found = score_prompts(model, tokenizer, config, spec.prompts, indices, batch_size=spec.batch_size,
                              prefill_chunk=spec.prefill_chunk, task=task)
        run.scores.update(found.scores)
        run.items.update(found.items)
        run.outcomes.update(found.outcomes)
        run.details.update(found.details)
    for part, scorer in ((real, _lm_eval_scores), (synthetic, _synthetic_scores)):
        if part:
            scored = scorer(model, tokenizer, config, part, spec)
            run.scores.update(scored.scores)
            run.items.update(scored.items)
            run.outcomes.update(scored.outcomes)
            run.details.update(scored.details)
    return run


def drop_of(full: TaskRun, other: TaskRun, *, seed: int = 0, confidence: float = 0.95,
            looks: Sequence[Mapping[str, int]] | None = None,
            planned: Mapping[str, int] | int | None = None) -> PairedDrop:
    """The paired drop of ``other`` against ``full`` over the higher-is-better tasks (bits per byte left out).

    Both runs must have scored the same items of each task (a workload prefix); ``confidence``: the interval's;
    ``looks`` and ``planned``: a race's looks so far (items per task) and its last planned look (items per task,
    or in all) (:func:`~poptune.evaluate.paired.paired_drop`; default: one look at these items).
    """
    tasks = [t for t in other.outcomes if PRIMARY_METRIC[t] not in LOWER_IS_BETTER] or list(other.outcomes)
    for task in tasks:
        if full.items[task][: len(other.items[task])] != other.items[task]:
            raise ConfigError(f"task {task!r}: the two runs scored different items")
    n = {t: len(other.outcomes[t]) for t in tasks}
    return paired_drop({t: full.outcomes[t][: n[t]] for t in tasks}, {t: other.outcomes[t] for t in tasks},
                       lower_is_better=[t for t in tasks if PRIMARY_METRIC[t] in LOWER_IS_BETTER],
                       scale=_scale(tasks), seed=seed, confidence=confidence,
                       looks=None if looks is None else [{t: look[t] for t in tasks} for look in looks],
                       planned=planned if not isinstance(planned, Mapping) else sum(planned[t] for t in tasks))


def _scale(tasks: Sequence[str]) -> float:
    return 1.0 if all(PRIMARY_METRIC[t] in LOWER_IS_BETTER for t in tasks) else 100.0


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
    details: dict[str, Any] = {}
    if spec.samples is None:  # the first `limit` items of each task's fixed order; too-long prompts skipped
        from poptune.engine import decoder_of
        from poptune.evaluate.workload import build_workload

        context = getattr(decoder_of(model).config, "max_position_embeddings", None)
        workload = build_workload(tokenizer, spec.tasks, data_dir=spec.data_dir, cap=spec.limit,
                                  synthetic_lengths=spec.synthetic_lengths, max_positions=context, seed=spec.seed,
                                  prompts=spec.prompts)
        spec = spec.with_samples(workload.order)
        details["skipped_too_long"] = workload.skipped
    runs = {}
    for which, cfg in (("full", PopConfig(skip=0)), ("pop", config)):
        runs[which] = measure_tasks(model, tokenizer, cfg, spec)
        for task, metrics in runs[which].scores.items():
            scores.setdefault(task, {})[which] = metrics
        for key, value in runs[which].details.items():
            details.setdefault(key, {})[which] = value
        if progress:
            progress(f"tasks ({which})")
    full, pop = runs["full"], runs["pop"]
    fidelity = None
    if spec.fidelity is not None:
        if spec.data_dir is not None:
            text, source = wikitext(spec.data_dir), "wikitext-2 test"
        else:
            needed = spec.fidelity.pairs * (spec.fidelity.context_tokens + spec.fidelity.continuation_tokens)
            text, source = generated_text(model, tokenizer, needed, seed=spec.seed), "text generated by the full model"
        pairs = fidelity_pairs(tokenizer, text, spec.fidelity)
        fidelity = measure_fidelity(model, tokenizer, config, pairs, source=source, prefill_chunk=spec.prefill_chunk)
        if progress:
            progress("fidelity")
    return EvalResult(config=config, scores=scores, items=pop.counts, fidelity=fidelity, details=details,
                      paired=drop_of(full, pop, seed=spec.seed), task_drops=task_drops(full, pop, seed=spec.seed))


def task_drops(full: TaskRun, pop: TaskRun, *, seed: int = 0) -> dict[str, PairedDrop]:
    """Each task's paired drop of ``pop`` against ``full`` on the same items (bits per byte: POP - full)."""
    drops = {}
    for task in pop.outcomes:
        lower = PRIMARY_METRIC[task] in LOWER_IS_BETTER
        drops[task] = paired_drop({task: full.outcomes[task]}, {task: pop.outcomes[task]},
                                  lower_is_better=[task] if lower else [], scale=1.0 if lower else 100.0, seed=seed)
    return drops
