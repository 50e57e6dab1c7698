"""Measure the methods of a comparison on one workload: per-item outcomes and request-profile timing pairs.

**Same items.** Every method is scored on the same N items of each task's fixed order (the study's order:
:meth:`poptune.problem.evaluator.ConfigEvaluator.score_first`), and each item's outcome is kept, so the board
pairs any two methods item by item. ``skip`` leaves out the first items of every order: the items a study chose
its POP configuration on (searched and certified), so that configuration is judged on items it was not chosen
on. With no items (``per_task=0``) a record holds timings only, for the board to lend to scored records.

**A request's time.** For each request profile (prompt tokens, output tokens) a method is timed against the
full model as interleaved pairs (:func:`poptune.measure.timer.measure_pair`, A-B then B-A): the prefill of the
profile's prompt (time to first token) and, from each side's own prefilled cache, ``decode_steps`` greedy
decode steps (time per output token; a static pruning removes its layers from decode too, POP decodes with
the full model). A pair's end-to-end time is ``TTFT + output * TPOT`` on each side, so pair i gives one
end-to-end ratio; the board takes medians with order-statistic intervals (:mod:`poptune.measure.stats`).
Decoding ``decode_steps`` tokens stands for decoding ``output``: the per-token cost grows a little with the
context on both sides alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from poptune.engine import PopConfig
from poptune.errors import ConfigError
from poptune.transform import Transform, applied

if TYPE_CHECKING:
    from poptune.problem.evaluator import ConfigEvaluator

__all__ = ["PROFILES", "RECORD", "Method", "Profile", "compare", "methods_for"]

#: The raw record's kind and version (checked when the board reads one).
RECORD = ("poptune-methods", 1)


@dataclass(frozen=True)
class Profile:
    """A request: ``prompt`` tokens in, ``output`` tokens out."""

    prompt: int
    output: int

    @property
    def label(self) -> str:
        return f"{self.prompt}+{self.output}"


#: A long prompt with a short answer (where prefill dominates) and a shorter prompt with a long answer.
PROFILES = (Profile(2048, 32), Profile(512, 256))


@dataclass(frozen=True)
class Method:
    """One row of a comparison: a name unique in it, the method, its label and ratio, and how to run it."""

    name: str
    method: str
    label: str
    ratio: float
    config: PopConfig
    transform: Transform | None = None
    details: dict[str, Any] | None = None


def methods_for(evaluator: "ConfigEvaluator", pop: Sequence[PopConfig], baselines: Sequence[str],
                ratios: Sequence[float], calibration: Any = None,
                progress: Callable[[str], None] | None = None) -> list[Method]:
    """The full model, each POP configuration and each baseline at each ratio (Wanda at its own sparsity)."""
    from poptune.baselines.methods import build_baseline
    from poptune.baselines.methods import method as baseline_method

    layers = evaluator.num_layers
    rows = [Method("full", "full", "full model", 0.0, PopConfig(skip=0))]
    for config in pop:
        config.check(layers)
        label = config.label
        rows.append(Method(f"pop {label}", "pop", label, config.skip / layers, config))
    memo: dict[str, Any] = {}
    for method in baselines:
        wanted = baseline_method(method).ratios(ratios)
        built = {}
        for ratio in sorted(wanted, reverse=True):  # the largest first: SLEB's shorter orders are its prefixes
            if progress:
                progress(f"building {method} at {ratio:.3g}")
            built[ratio] = build_baseline(evaluator.model, evaluator.tokenizer, method, ratio, calibration,
                                          memo=memo, progress=progress)
        for ratio in wanted:
            b = built[ratio]
            rows.append(Method(f"{method} {ratio:.3g}", method, b.label, ratio, b.pop, b.transform, b.describe()))
    return rows


def _timing(evaluator: "ConfigEvaluator", row: Method, profile: Profile, pairs: int,
            decode_steps: int) -> dict[str, Any]:
    """``row`` against the full model for one profile: TTFT and per-token decode pairs (a = method, b = full)."""
    import torch

    from poptune.measure.prefill import decode, prefill
    from poptune.measure.timer import RepeatPolicy, Staged, Timer, measure_pair
    from poptune.measure.timing_prompts import prompt_batch

    model = evaluator.model
    inputs = prompt_batch(evaluator.tokenizer, profile.prompt, 1, device=model.device)
    config = row.config if row.config.skip else None
    timer = Timer(model.device)
    policy = RepeatPolicy(warmup=1, min_repeats=pairs, max_repeats=pairs, min_seconds=0.0)

    def method_prefill() -> Any:
        with applied(model, row.transform):
            return prefill(model, inputs, config)

    def method_decode(out: Any) -> None:
        with applied(model, row.transform):
            decode(model, out, inputs, decode_steps)

    def full_prefill() -> Any:
        return prefill(model, inputs, None)

    with torch.inference_mode():
        ttft = measure_pair(method_prefill, full_prefill, timer=timer, policy=policy)
        tpot = measure_pair(Staged(method_prefill, method_decode),
                            Staged(full_prefill, lambda out: decode(model, out, inputs, decode_steps)),
                            timer=timer, policy=policy)
    per_token = [[v / decode_steps for v in side.values_ms] for side in (tpot.a, tpot.b)]
    return {"ttft_ms": {"a": ttft.a.values_ms, "b": ttft.b.values_ms, "order": ttft.order},
            "tpot_ms": {"a": per_token[0], "b": per_token[1], "order": tpot.order}}


def _score(evaluator: "ConfigEvaluator", row: Method, counts: dict[str, int], skip: int) -> dict[str, Any]:
    started = time.monotonic()
    run = evaluator.score_first(row.config, counts, transform=row.transform, skip=skip)
    return {"outcomes": {t: [float(v) for v in run.outcomes[t]] for t in sorted(run.outcomes)},
            "items": {t: list(run.items[t]) for t in sorted(run.items)},
            "score_seconds": round(time.monotonic() - started, 1)}


def compare(evaluator: "ConfigEvaluator", rows: Sequence[Method], *, workload: str, per_task: int,
            profiles: Sequence[Profile] = PROFILES, pairs: int = 6, decode_steps: int = 16, skip: int = 0,
            progress: Callable[[str], None] | None = None, command: str | None = None) -> dict[str, Any]:
    """Score every row on the same ``per_task`` items of each task (after the first ``skip`` of its order; none:
    timings only) and time it for each profile; the raw record (JSON-serialisable) the board reads, with its
    :class:`~poptune.measure.provenance.Provenance` (``command``: the command line that made it, as typed)."""
    from poptune.measure.hardware import fingerprint
    from poptune.measure.provenance import Provenance
    from poptune.models.registry import resolve_model

    if per_task < 0 or skip < 0 or pairs < 6 or decode_steps < 1 or not (per_task or profiles):
        raise ConfigError(f"a comparison needs items (>= 0 per task, after >= 0 skipped) or profiles, >= 6 timing "
                          f"pairs (an interval of the median at 95%) and >= 1 decode step, got {per_task}, {skip}, "
                          f"{pairs}, {decode_steps}")
    tasks = evaluator.problem.tasks if per_task else []
    counts = {t: min(per_task, evaluator.workload.size(t) - skip) for t in tasks}
    if any(n < 1 for n in counts.values()):
        raise ConfigError(f"no items left after skipping {skip} of every task's order: {counts}")
    pop = [r.config for r in rows if r.method == "pop" and r.transform is None] if counts else []
    with evaluator.sharing(pop):  # the full model's row scores every POP row too (poptune.engine.trunk)
        entries = [_entry(evaluator, row, counts, skip, profiles, pairs, decode_steps, progress) for row in rows]
    hardware = fingerprint(evaluator.model.device)
    p = evaluator.problem
    return {"record": RECORD[0], "version": RECORD[1], "workload": workload, "model": resolve_model(p.model).name,
            "num_layers": evaluator.num_layers, "tasks": list(tasks), "per_task": per_task,
            "skip": skip, **Provenance.here(command=command, hardware=hardware.to_dict()).to_dict(),
            "profiles": [[q.prompt, q.output] for q in profiles], "pairs": pairs, "decode_steps": decode_steps,
            "methods": entries}


def _entry(evaluator: "ConfigEvaluator", row: Method, counts: dict[str, int], skip: int,
           profiles: Sequence[Profile], pairs: int, decode_steps: int,
           progress: Callable[[str], None] | None) -> dict[str, Any]:
    """One row's record: its outcomes on the items (``score_seconds``: the full model's row also pays the shared
    POP rows' own layers, theirs only what was left) and its timings per profile."""
    entry: dict[str, Any] = {"name": row.name, "method": row.method, "label": row.label, "ratio": row.ratio,
                             "config": row.config.to_dict(), "details": row.details or {}}
    if counts:
        if progress:
            progress(f"scoring {row.name} on {sum(counts.values())} items")
        entry.update(_score(evaluator, row, counts, skip))
    if row.method != "full" and profiles:
        if progress:
            progress(f"timing {row.name}")
        entry["timing"] = {p.label: _timing(evaluator, row, p, pairs, decode_steps) for p in profiles}
    return entry
