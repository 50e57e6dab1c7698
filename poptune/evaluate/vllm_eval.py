"""The embedded tasks' accuracy through vLLM: POP served with poptune's plugin against vLLM's full model.

The vLLM runtime of ``poptune eval`` (``--runtime vllm``): the same items as ``run_eval`` takes (the workload's
first ``limit`` of each task, too-long prompts skipped), their prompts tokenized as poptune's engine tokenizes them,
answered greedily by two vLLM engines (POP's and the full model's, :class:`~poptune.serving.vllm_client.VllmEngine`)
and graded by the tasks' own rule (:func:`poptune.evaluate.synthetic.is_correct`); the drop is paired over the same
items as ``run_eval``'s. Generation tasks only: vLLM under POP serves no prompt log-probabilities, so tasks judged by
likelihood (lm-eval's multiple choice, the likelihood judge) are refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from poptune.engine import PopConfig
from poptune.errors import ConfigError
from poptune.evaluate.suite import EMBEDDED, EvalResult, EvalSpec, TaskRun, drop_of, task_drops
from poptune.evaluate.synthetic import ANSWER_TOKENS, is_correct
from poptune.serving.vllm_client import VllmEngine

__all__ = ["answer_tasks", "check_tasks", "run_vllm_eval"]


def _answers(engine: VllmEngine, prompts: list[list[int]]) -> list[list[int]]:
    return [a["tokens"] for a in engine.generate(prompts, max_tokens=ANSWER_TOKENS)["answers"]]


def check_tasks(spec: EvalSpec) -> None:
    """Refuse what the vLLM runtime cannot score: tasks other than the embedded generation ones, fidelity, chunks.

    Raises:
        ConfigError: in one line.
    """
    other = [t for t in spec.tasks if t not in EMBEDDED]
    if other or spec.fidelity is not None or spec.prefill_chunk or spec.prompts:
        raise ConfigError(f"the vLLM runtime scores the embedded generation tasks ({', '.join(EMBEDDED)}) only, "
                          f"without fidelity or --prefill-chunk; got {', '.join(other) or 'those options'}")


def _items(tokenizer: Any, spec: EvalSpec) -> list[Any]:
    """The synthetic items of ``spec.samples``, task by task (the pools ``measure_tasks`` draws from)."""
    from poptune.evaluate.workload import synthetic_pool

    assert spec.samples is not None  # given by the caller (a workload's order)
    items = []
    for task in spec.tasks:
        chosen = list(spec.samples[task])
        pool = synthetic_pool(tokenizer, task, max(chosen) + 1, lengths=spec.synthetic_lengths, seed=spec.seed)
        items += [pool[i] for i in chosen]
    return items


def answer_tasks(engine: VllmEngine, tokenizer: Any, spec: EvalSpec) -> tuple[TaskRun, list[list[int]]]:
    """One engine's run on ``spec``'s items (``spec.samples``): its graded outcomes and its answers' tokens."""
    check_tasks(spec)
    items = _items(tokenizer, spec)
    answers = _answers(engine, [tokenizer(item.prompt)["input_ids"] for item in items])
    texts = [tokenizer.decode(t, skip_special_tokens=True) for t in answers]
    correct = [is_correct(text, item.answer) for text, item in zip(texts, items)]
    outcomes = {task: [float(c) for c, item in zip(correct, items) if item.task == task] for task in spec.tasks}
    scores = {task: {"acc": sum(o) / len(o)} for task, o in outcomes.items()}
    assert spec.samples is not None
    return TaskRun(scores, {t: list(spec.samples[t]) for t in spec.tasks}, outcomes, {"runtime": "vllm"}), answers


def run_vllm_eval(directory: str | Path, tokenizer: Any, config: PopConfig, spec: EvalSpec, *,
                  engine: dict[str, Any] | None = None) -> EvalResult:
    """Accuracy of ``config`` served by vLLM and of vLLM's full model on ``spec``'s embedded tasks, paired.

    Raises:
        ConfigError: A task other than the embedded generation tasks, fidelity or chunked prefill asked for.
    """
    from transformers import AutoConfig

    from poptune.evaluate.workload import build_workload

    check_tasks(spec)
    context = AutoConfig.from_pretrained(directory).get_text_config().max_position_embeddings
    workload = build_workload(tokenizer, spec.tasks, data_dir=None, cap=spec.limit,
                              synthetic_lengths=spec.synthetic_lengths, max_positions=context, seed=spec.seed)
    spec = spec.with_samples(workload.order)
    longest = max(len(tokenizer(item.prompt)["input_ids"]) for item in _items(tokenizer, spec)) + ANSWER_TOKENS
    settings = {"max_model_len": longest, "max_num_batched_tokens": max(longest, 2048)} | dict(engine or {})
    with VllmEngine(directory, pop={"pop_config": config.to_dict()}, engine=settings) as pop, \
            VllmEngine(directory, engine=settings) as full:
        (full_run, full_answers), (pop_run, pop_answers) = (answer_tasks(e, tokenizer, spec) for e in (full, pop))
    changed = sum(a != b for a, b in zip(full_answers, pop_answers))
    return EvalResult(
        config=config, scores={t: {"full": full_run.scores[t], "pop": pop_run.scores[t]} for t in spec.tasks},
        items=pop_run.counts, fidelity=None,
        details={"runtime": "vllm", "answers_changed": {"changed": changed, "items": len(full_answers)},
                 "skipped_too_long": workload.skipped},
        paired=drop_of(full_run, pop_run, seed=spec.seed), task_drops=task_drops(full_run, pop_run, seed=spec.seed))
