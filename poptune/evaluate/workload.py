"""A workload: the items a study scores, in one fixed order, with the length of each item's prompt.

POP changes only the pruned prompt tokens' path, so accuracy means something only on the prompts whose
latency is timed. A workload therefore gives both: the items accuracy is measured on (every configuration
takes them in the same fixed order, so a trial that stops after n items has scored the same n items as the
full model) and the prompt lengths that latency is timed at (:meth:`Workload.latency_points`).

- Real tasks (lm-eval): the order is a fixed permutation of the task's documents (seed :data:`ORDER_SEED`),
  so any prefix is a uniform sample of the whole set. A document's prompt length is its ``doc_to_text`` in
  tokens (the few-shot examples of the long-prompt pack are part of that text).
- Synthetic tasks: an unbounded pool, built in blocks of one item per cell (passkey: every length x depth;
  key-value recall: every number of pairs), block ``r`` from its own seed, so the first n items are the same
  whatever the pool's size and every prefix covers every cell about evenly.

Items whose prompt (plus the tokens a generation may add) does not fit the model's context are left out of the
order and counted in :attr:`Workload.skipped`, never truncated.
"""

from __future__ import annotations

import functools
import itertools
import math
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from poptune.errors import ConfigError
from poptune.evaluate.judges import LIKELIHOOD_TASKS, base_task
from poptune.evaluate.prompts import PROMPT_TASKS, REFERENCES, PromptRequest

__all__ = ["ORDER_SEED", "SYNTHETIC_MAX", "Workload", "build_workload", "check_supply", "supply", "synthetic_pool",
           "task_prompts", "task_requests"]

#: Seed of the fixed item order of real tasks: the same items in the same order for every trial and study.
ORDER_SEED = 1234

#: Items of a synthetic task when no cap is given.
SYNTHETIC_DEFAULT = 20

#: Items per task a synthetic task supplies at most. Its pool is built up front (every prompt tokenized), and
#: beyond this many items a count is a typo, not a plan: ``--certify 100000`` built items for tens of minutes
#: before measuring anything (issue 57), and the passkeys (five digits) would repeat.
SYNTHETIC_MAX = 10_000

#: Tokens a generation may add after the prompt (a prompt must leave this much room in the context).
GENERATION_ROOM = 256

_KV_PAIRS = (8, 32)
_PASSKEY_DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)


@dataclass(frozen=True)
class Workload:
    """Items per task in scoring order, their prompt lengths, and the items left out.

    Attributes:
        order: Per task, item indices in the order every configuration scores them.
        tokens: Per task, the prompt length in tokens of each item of ``order`` (same positions).
        skipped: Per task, items left out because their prompt does not fit the model's context.
        synthetic_lengths: Prompt lengths the synthetic passkey items were built at.
        seed: Seed of the synthetic items.
    """

    order: dict[str, list[int]]
    tokens: dict[str, list[int]]
    skipped: dict[str, int] = field(default_factory=dict)
    synthetic_lengths: tuple[int, ...] = (512,)
    seed: int = 0

    def items(self, task: str, count: int | None) -> list[int]:
        """The first ``count`` items of ``task`` (all with None)."""
        return self.order[task] if count is None else self.order[task][:count]

    def size(self, task: str) -> int:
        return len(self.order[task])

    def after(self, start: int) -> "Workload":
        """The items from position ``start`` on of every task's order: items a search's first ``start`` never
        scored (a certification's fresh items)."""
        return Workload({t: o[start:] for t, o in self.order.items()}, {t: n[start:] for t, n in self.tokens.items()},
                        dict(self.skipped), self.synthetic_lengths, self.seed)

    def latency_points(self, count: int | None, points: int = 3) -> list[tuple[int, float]]:
        """Prompt lengths to time and the share of scored prompts each stands for.

        The prompts of the first ``count`` items of every task are sorted by length and cut into ``points``
        groups of equal size; each group is timed at its median length and weighs its share of the prompts.
        Groups whose medians coincide are merged. Returns ``[(length, weight), ...]``, shortest first.
        """
        lengths = sorted(n for task in self.order for n in self.tokens[task][: count or None])
        if not lengths:
            raise ConfigError("the workload has no items to time")
        merged: dict[int, float] = {}
        groups = min(points, len(lengths))
        for g in range(groups):
            part = lengths[g * len(lengths) // groups : (g + 1) * len(lengths) // groups]
            median = part[len(part) // 2]
            merged[median] = merged.get(median, 0.0) + len(part) / len(lengths)
        return sorted(merged.items())

    def to_dict(self) -> dict[str, Any]:
        return {"items": {t: len(o) for t, o in self.order.items()}, "skipped": dict(self.skipped),
                "synthetic_lengths": list(self.synthetic_lengths)}


#: Synthetic pools built so far, per tokenizer (while it lives): ``(task, lengths, seed) -> items``. A pool's
#: first items never change as it grows, so a longer pool serves every shorter request: a study's every round
#: and configuration asks for the same items again, and building them tokenizes each prompt many times.
_POOLS: "weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], list[Any]]]" = weakref.WeakKeyDictionary()


def synthetic_pool(tokenizer: Any, task: str, size: int, *, lengths: Sequence[int], seed: int) -> list[Any]:
    """The first ``size`` items of a synthetic task's pool (see the module docstring)."""
    try:
        built = _POOLS.setdefault(tokenizer, {})
    except TypeError:  # a tokenizer that takes no weak reference: built every time
        built = {}
    key = (task, tuple(lengths), seed)
    if len(built.get(key, ())) < size:
        built[key] = _build_pool(tokenizer, task, size, lengths=lengths, seed=seed)
    return built[key][:size]


def _build_pool(tokenizer: Any, task: str, size: int, *, lengths: Sequence[int], seed: int) -> list[Any]:
    from poptune.evaluate.synthetic import KV_RECALL, PASSKEY, kv_recall_items, passkey_items

    items: list[Any] = []
    block = 0
    while len(items) < size:
        block_seed = seed * 100_003 + block  # one seed per block: earlier blocks never change
        if task == PASSKEY:
            items += passkey_items(tokenizer, lengths=tuple(lengths), depths=_PASSKEY_DEPTHS, seed=block_seed)
        elif task == KV_RECALL:
            items += kv_recall_items(tokenizer, num_pairs=_KV_PAIRS, per_cell=1, seed=block_seed)
        else:
            raise ConfigError(f"{task!r} is not a synthetic task")
        block += 1
    return items[:size]


def task_requests(tokenizer: Any, task: str, indices: Sequence[int], *, data_dir: Path | None,
                  synthetic_lengths: Sequence[int], seed: int, metric: str | None = None) -> dict[int, PromptRequest]:
    """A likelihood judge's items (:mod:`poptune.evaluate.judges`): the items ``indices`` of likelihood-judged
    ``task`` as prompt requests: the item's prompt as the task prompts it (a real task's ``doc_to_text``, a
    synthetic item's prompt), ``max_tokens`` = the task's generation length (its ``max_gen_toks``; synthetic:
    :data:`~poptune.evaluate.synthetic.ANSWER_TOKENS`) and ``stop`` = its stop sequences (``until``). ``line`` is
    the item's index; ``grade`` its task's own metric of a generated text (the accuracy judge's, recorded beside
    the likelihood: :func:`poptune.evaluate.answers.score_requests`): a synthetic item's number, a real task's
    ``metric`` of its ``process_results`` (None: real items are not graded)."""
    from poptune.evaluate.synthetic import ANSWER_TOKENS, EMBEDDED, is_correct

    base = base_task(task)
    if task not in LIKELIHOOD_TASKS:
        raise ConfigError(f"task {task!r} is not likelihood-judged")
    if base in EMBEDDED:
        pool = synthetic_pool(tokenizer, base, max(indices) + 1, lengths=synthetic_lengths, seed=seed)
        return {int(i): PromptRequest(int(i), pool[i].prompt, None, ANSWER_TOKENS,
                                      grade=functools.partial(_graded, is_correct, pool[i].answer)) for i in indices}
    from poptune.evaluate.taskpack import get_task_dict

    if data_dir is None:
        raise ConfigError("real tasks need a data directory: pass --data-dir or set POPTUNE_DATA")
    spec = get_task_dict([base], data_dir)["tasks"][base]
    kwargs = dict(getattr(spec.config, "generation_kwargs", None) or {})
    max_tokens = int(kwargs.get("max_gen_toks", 256))
    until = kwargs.get("until") or ()
    stop = (until,) if isinstance(until, str) else tuple(str(s) for s in until)
    docs = spec.eval_docs
    return {int(i): PromptRequest(int(i), str(spec.doc_to_text(docs[int(i)])), None, max_tokens, stop=stop,
                                  grade=None if metric is None else functools.partial(_task_metric, spec,
                                                                                      docs[int(i)], metric))
            for i in indices}


def _graded(check: Any, answer: str, text: str) -> float:
    """A synthetic item's accuracy of ``text``: ``check(text, answer)`` as 0 or 1."""
    return float(check(text, answer))


def _task_metric(spec: Any, doc: Any, metric: str, text: str) -> float:
    """A task pack item's own metric of a generated ``text``: the task's ``process_results``, as lm-eval scores
    its generation."""
    return float(spec.process_results(doc, [text])[metric])


def supply(task: str, data_dir: Path | None) -> int | None:
    """Items ``task`` can supply: :data:`SYNTHETIC_MAX` for a synthetic task, the documents of a real task's file
    in ``data_dir`` (its lines), None when not known here (a prompts file; a real task without its file). A
    likelihood-judged task supplies its base task's items."""
    from poptune.evaluate.synthetic import EMBEDDED
    from poptune.evaluate.taskpack import SOURCES

    task = base_task(task)
    if task in EMBEDDED:
        return SYNTHETIC_MAX
    source = SOURCES.get(task)
    if source is None or data_dir is None or "docs" not in source.files:
        return None
    try:
        with open(Path(data_dir) / source.files["docs"], "rb") as f:
            return sum(1 for line in f if line.strip())
    except OSError:
        return None  # check_data names the missing file


def check_supply(tasks: Sequence[str], data_dir: Path | None, counts: dict[str, int], built: int) -> None:
    """Refuse, in one line, a count no task of ``tasks`` can supply.

    Args:
        tasks: The tasks.
        data_dir: Their data directory (real tasks).
        counts: Options by name (``--certify``) and their values: each must be within a real task's documents.
        built: Items per task a synthetic task would build (the search's cap and the certification's together).

    Raises:
        ConfigError: A count beyond what a task supplies.
    """
    from poptune.evaluate.synthetic import EMBEDDED

    for task in tasks:
        most = supply(task, data_dir)
        if most is None:
            continue
        if base_task(task) in EMBEDDED:
            if built > most:
                shown = " + ".join(f"{name} {value}" for name, value in counts.items())
                raise ConfigError(f"{shown} asks {built} items per task; synthetic task {task} supplies at most "
                                  f"{most}")
            continue
        for name, value in counts.items():
            if value > most:
                raise ConfigError(f"`{name}` {value} is more items than task {task} holds ({most} in {data_dir})")


def task_prompts(tasks: Sequence[str], data_dir: Path | None) -> dict[str, list[str]]:
    """Every item's prompt text of each task-pack task of ``tasks``, in the pack's item order (``data_dir``'s
    documents)."""
    from poptune.evaluate.taskpack import get_task_dict

    task_dict = get_task_dict(list(tasks), data_dir)["tasks"]
    prompts = {}
    for name in tasks:
        task = task_dict[name]
        prompts[name] = [str(task.doc_to_text(doc)) for doc in task.eval_docs]
    return prompts


def build_workload(
    tokenizer: Any,
    tasks: Sequence[str],
    *,
    data_dir: Path | None,
    cap: int | None,
    synthetic_lengths: Sequence[int] = (512,),
    max_positions: int | None = None,
    seed: int = 0,
    prompts: str | None = None,
) -> Workload:
    """The workload of ``tasks``: at most ``cap`` items of each, in scoring order, with their prompt lengths.

    Args:
        tokenizer: The model's tokenizer (prompt lengths, synthetic prompt sizes).
        tasks: Real task names of the offline pack and/or synthetic ones.
        data_dir: The data directory of the real tasks.
        cap: Items per task at most (the racing cap); None: every item of a real task,
            :data:`SYNTHETIC_DEFAULT` of a synthetic one.
        synthetic_lengths: Prompt lengths of synthetic passkey items.
        max_positions: The model's context; longer prompts (with :data:`GENERATION_ROOM`) are skipped.
        seed: Seed of the synthetic items.
        prompts: The prompts file of task ``prompts`` (:mod:`poptune.evaluate.prompts`): its requests in a fixed
            permutation; one fits when it and its ``max_tokens`` fit the context.
    """
    import numpy as np

    from poptune.evaluate.synthetic import EMBEDDED

    if cap is not None and cap < 1:
        raise ConfigError(f"a workload needs at least one item per task, got a cap of {cap}")
    room = None if max_positions is None else max_positions - GENERATION_ROOM
    order: dict[str, list[int]] = {}
    tokens: dict[str, list[int]] = {}
    skipped: dict[str, int] = {}
    base = {t: base_task(t) for t in tasks}  # a likelihood-judged task has its base task's items, in its order
    real = list(dict.fromkeys(base[t] for t in tasks if base[t] not in EMBEDDED and t not in PROMPT_TASKS))
    texts_of = task_prompts(real, data_dir) if real else {}
    for task in tasks:
        if task in PROMPT_TASKS:
            want, candidates, lengths, fits = _prompt_candidates(tokenizer, prompts, cap, max_positions,
                                                                 references=task == REFERENCES)
            order[task] = [i for i in candidates if fits[i]][:want]
            tokens[task] = [lengths[i] for i in order[task]]
            skipped[task] = sum(1 for i in candidates if not fits[i])
            continue
        if base[task] in EMBEDDED:
            want = cap or SYNTHETIC_DEFAULT
            for size in (want, 2 * want):  # twice as many only when some do not fit
                pool = synthetic_pool(tokenizer, base[task], size, lengths=synthetic_lengths, seed=seed)
                candidates = list(range(len(pool)))
                lengths = [int(item.meta["tokens"]) for item in pool]
                if room is None or sum(n <= room for n in lengths) >= want:
                    break
        else:
            texts = texts_of[base[task]]
            want = cap or len(texts)
            candidates = [int(i) for i in np.random.default_rng(ORDER_SEED).permutation(len(texts))]
            lengths = [0] * len(texts)
            for i in candidates[: 2 * want]:  # enough to fill the cap unless most items are too long
                lengths[i] = len(tokenizer(texts[i])["input_ids"])
        kept = [i for i in candidates if lengths[i] and (room is None or lengths[i] <= room)]
        skipped[task] = sum(1 for i in candidates if lengths[i] and room is not None and lengths[i] > room)
        order[task] = kept[:want]
        tokens[task] = [lengths[i] for i in order[task]]
        if not order[task]:
            raise ConfigError(f"task {task!r} has no item whose prompt fits this model's {max_positions} positions")
    return Workload(order, tokens, skipped, tuple(synthetic_lengths), seed)


def _prompt_candidates(tokenizer: Any, path: str | None, cap: int | None, max_positions: int | None, *,
                       references: bool = False) -> tuple[int, list[int], list[int], list[bool]]:
    """Items wanted, the fixed order, each request's prompt length, and whether it fits (the tasks of a prompts
    file; with ``references``, the requests with a reference ``answer`` only)."""
    import numpy as np

    from poptune.evaluate.prompts import check_fit, read_prompts

    if path is None:
        raise ConfigError("task `prompts` needs a prompts file (`--prompts FILE`)")
    requests = read_prompts(path)
    lengths = check_fit(tokenizer, requests, max_positions, path)
    fits = [max_positions is None or n + r.max_tokens <= max_positions for n, r in zip(lengths, requests)]
    candidates = [int(i) for i in np.random.default_rng(ORDER_SEED).permutation(len(requests))]
    if references:
        candidates = [i for i in candidates if requests[i].answer is not None]
        if not candidates:
            raise ConfigError(f"`--prompts` {path} has no request with an `answer`: nothing to judge references on")
    return cap or len(requests), candidates, lengths, fits


def rounds(start: int, cap: int, growth: float = 2.0) -> list[int]:
    """Cumulative item counts of racing rounds: ``start, start*growth, ...`` up to and including ``cap``."""
    if start < 1 or cap < 1 or growth <= 1:
        raise ConfigError(f"racing rounds need start >= 1, cap >= 1 and growth > 1, got {start}, {cap}, {growth}")
    counts = []
    n = min(start, cap)
    while n < cap:
        counts.append(n)
        n = min(cap, int(math.ceil(n * growth)))
    counts.append(cap)
    return counts


def calibration_prompts(
    tokenizer: Any,
    workload: Workload,
    *,
    data_dir: Path | None,
    count: int,
    max_tokens: int,
    prompts_file: str | None = None,
) -> tuple[list[str], str]:
    """Prompts of the workload's tasks that it never scores, for fitting calibrated K/V (:mod:`poptune.kvfit.fit`).

    Real tasks: the last ``count`` documents of the task's fixed permutation (:data:`ORDER_SEED`) that are not
    in ``workload.order`` -- the racing and certification items are a prefix of that permutation, so these are
    disjoint from every item accuracy is scored on, however far a race or certification goes. Synthetic tasks:
    ``count`` pool items after the scored ones (a pool's items are independent draws). A prompts file
    (``prompts_file``): the last ``count`` of its requests in their fixed order that the workload does not hold
    (none when every request is searched or certified, as in a small file). Prompts longer than ``max_tokens``
    tokens are left out (not truncated). The tasks' prompts are interleaved (one of each task in turn), so a fit
    that stops at a token budget still holds every task's content, in even shares.

    Returns:
        ``(prompts, description)``: the texts and which items they are, said in words.
    """
    import numpy as np

    from poptune.evaluate.synthetic import EMBEDDED

    real = list(dict.fromkeys(base_task(t) for t in workload.order
                              if base_task(t) not in EMBEDDED and t not in PROMPT_TASKS))
    texts = task_prompts(real, data_dir) if real else {}
    per_task: list[list[str]] = []
    said = []
    for task, scored in workload.order.items():
        if task in PROMPT_TASKS:
            chosen = _spare_requests(tokenizer, prompts_file, set(scored), count)
            where = f"{len(chosen)} requests of the file that are neither searched nor certified"
        elif base_task(task) in EMBEDDED:
            reach = max(scored, default=-1) + 1
            pool = synthetic_pool(tokenizer, base_task(task), reach + count, lengths=workload.synthetic_lengths,
                                  seed=workload.seed)[reach:]
            chosen = [item.prompt for item in pool]
            where = f"pool items {reach}-{reach + count - 1}"
        else:
            taken = set(scored)
            order = [int(i) for i in np.random.default_rng(ORDER_SEED).permutation(len(texts[base_task(task)]))]
            rest = [i for i in order if i not in taken]
            chosen = [texts[base_task(task)][i] for i in rest[-count:]]
            where = f"the last {len(chosen)} of {len(order)} documents of its fixed order (never scored)"
        kept = [t for t in chosen if len(tokenizer(t)["input_ids"]) <= max_tokens]
        per_task.append(kept)
        said.append(f"{task}: {len(kept)} prompts, {where}")
    prompts = [p for turn in itertools.zip_longest(*per_task) for p in turn if p is not None]
    return prompts, "study workload calibration split: " + "; ".join(said)


def _spare_requests(tokenizer: Any, path: str | None, taken: set[int], count: int) -> list[str]:
    """The last ``count`` requests of a prompts file's fixed order outside ``taken``, rendered (a chat's BOS left
    to the fit's tokenizer, which writes it once)."""
    import numpy as np

    from poptune.evaluate.prompts import read_prompts, render

    if path is None:
        return []
    requests = read_prompts(path)
    order = [int(i) for i in np.random.default_rng(ORDER_SEED).permutation(len(requests))]
    rest = [i for i in order if i not in taken][-count:] if count else []
    bos = getattr(tokenizer, "bos_token", None) or ""
    texts = [render(tokenizer, requests[i]) for i in rest]
    return [t[len(bos):] if bos and requests[i].prompt is None and t.startswith(bos) else t
            for i, t in zip(rest, texts)]
