"""Benchmark: what a likelihood-judged item costs, the full model plus one candidate, before and after one prefill.

A study under ``--judge likelihood`` scores each item twice: the full model (its greedy answer, and that answer's
likelihood, the item's reference) and the candidate (its greedy answer, graded beside, and the likelihood of the
full answer after its prefill). Two ways, by :func:`poptune.evaluate.answers.score_requests`:

- **before** (``one_prefill=False``): each side generates, then prefills the prompt again to score the full
  answer teacher-forced;
- **after** (the default), as a study scores: the full model's answer is generated over its prefill and scored by
  one forward over it after the same prefill (:func:`poptune.engine.speculate.generate_own_scored`), the
  candidate's answer and score come from one prefill, whose layers below its block are replayed from the full
  model's (a study's state reuse, :mod:`poptune.engine.prefix`), and one forward over the full answer
  (:func:`poptune.engine.speculate.generate_scored`), decoding only where its answer leaves the full model's; a
  row ends once its text holds a stop sequence (before generates to the token limit, then cuts).

Nothing is cached between ways: each starts with no full answer kept. Items are taken in chunks; in every chunk
the two ways run back to back, their order alternating (this shared machine drifts); the ratio is the summed
seconds of before over after, with the median per-chunk ratio and its range. Null check: both ways give every
item the same answers (changed or not, the task's grade) and likelihoods within ``--tolerance`` (1e-3; the two
ways feed the answer in forwards of different widths, which round apart in bfloat16). In bfloat16 a greedy answer
may differ between ways where two tokens nearly tie (a one-token step and a longer forward round apart): such
items are counted and named, not failed.

Usage::

    python benchmarks/bench_likelihood_item.py --data-dir ../shared/data [--chunks 2] [--per-chunk 2]

Writes ``leaderboards/likelihood-item-cost-<model>-<hardware>.md`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from poptune import PopConfig, load_model
from poptune.device import dtype_of
from poptune.evaluate.answers import ITEMS_KEY, full_answers, score_requests
from poptune.evaluate.judges import base_task
from poptune.evaluate.prompts import LIKELIHOOD
from poptune.evaluate.suite import PRIMARY_METRIC
from poptune.evaluate.workload import task_requests
from poptune.measure.hardware import fingerprint
from poptune.measure.provenance import typed_command, versions

ROOT = Path(__file__).resolve().parents[1]


def _way(model, tok, config, requests, items, one_prefill: bool) -> tuple[float, dict]:
    """Seconds for the full model and ``config`` on ``items``, and the candidate's figures per item."""
    import contextlib

    from poptune.engine.prefix import PrefixStates

    full_answers(model).clear()
    start = time.perf_counter()
    with PrefixStates().attached(model) if one_prefill else contextlib.nullcontext():
        full = score_requests(model, tok, PopConfig(skip=0), requests, items, task=LIKELIHOOD, one_prefill=one_prefill)
        pop = score_requests(model, tok, config, requests, items, task=LIKELIHOOD, one_prefill=one_prefill)
    seconds = time.perf_counter() - start
    full_answers(model).clear()
    return seconds, {"full": full.details[ITEMS_KEY], "pop": pop.details[ITEMS_KEY]}


def _apart(a: dict, b: dict) -> tuple[float, list[tuple[str, int]]]:
    """Between two ways' figures (the full model's and the candidate's): the largest difference of an item's
    likelihood, and the (side, item) whose answer or grade differs."""
    largest, answers = 0.0, []
    exact = ("unchanged", "divergence", "correct", "full_correct")
    for side in ("full", "pop"):
        x, y = a[side], b[side]
        assert x.keys() == y.keys()
        for i in x:
            if any(x[i].get(k) != y[i].get(k) for k in exact):
                answers.append((side, i))
            if (x[i]["prob"] is None) != (y[i]["prob"] is None):
                largest = float("inf")
            elif x[i]["prob"] is not None:
                largest = max(largest, abs(x[i]["prob"] - y[i]["prob"]))
    return largest, answers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3")
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--tasks", default="longctx_squad:likelihood,passkey:likelihood")
    parser.add_argument("--candidate", default="6/last/0")
    parser.add_argument("--chunks", type=int, default=2)
    parser.add_argument("--per-chunk", type=int, default=2)
    parser.add_argument("--dtype", help="default: the device's native precision (poptune.load_model)")
    parser.add_argument("--tolerance", type=float, default=1e-3,
                        help="largest likelihood difference between the ways the null check allows")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    skip, boundary, offset = args.candidate.split("/")
    config = PopConfig(skip=int(skip), boundary=boundary, offset=int(offset))
    model, tok = load_model(args.model, dtype=args.dtype)
    rows, began, widest, rounded = [], time.perf_counter(), 0.0, []
    # In a half precision a one-token decode step and a forward over several tokens round apart, and a greedy
    # answer can follow either where two tokens nearly tie: there answers are counted, not required equal.
    half = dtype_of(model) != "float32"
    for task in args.tasks.split(","):
        start = 32  # fresh items, as a certification's
        items = list(range(start, start + args.chunks * args.per_chunk))
        requests = task_requests(tok, task, items, data_dir=args.data_dir, synthetic_lengths=(512,), seed=0,
                                 metric=PRIMARY_METRIC[base_task(task)])
        totals, ratios = {"before": 0.0, "after": 0.0}, []
        for c in range(args.chunks):
            chunk = items[c * args.per_chunk:(c + 1) * args.per_chunk]
            order = [False, True] if c % 2 == 0 else [True, False]
            seconds, figures = {}, {}
            for one in order:
                seconds[one], figures[one] = _way(model, tok, config, requests, chunk, one)
            apart, answers = _apart(figures[True], figures[False])
            if apart > args.tolerance or (answers and not half):
                print(f"null check failed on {task} items {chunk} (likelihoods {apart} apart, answers apart: "
                      f"{answers}): {figures}", file=sys.stderr)
                return 1
            widest = max(widest, apart)
            rounded += answers
            totals["before"] += seconds[False]
            totals["after"] += seconds[True]
            ratios.append(seconds[False] / seconds[True])
            print(f"{task} chunk {c}: before {seconds[False]:.1f} s, after {seconds[True]:.1f} s", flush=True)
        n = len(items)
        rows.append(f"| {task} | {args.candidate} | {n} | {totals['before'] / n:.2f} | {totals['after'] / n:.2f} | "
                    f"**{totals['before'] / totals['after']:.2f}x** | {statistics.median(ratios):.2f}x "
                    f"[{min(ratios):.2f}, {max(ratios):.2f}] ({len(ratios)} chunks) |")
    command = typed_command(["benchmarks/bench_likelihood_item.py", *(argv if argv is not None else sys.argv[1:])],
                            program=None)  # as a user types it, no path of this machine
    hardware, v = fingerprint(model.device), versions()
    lines = [f"# What a likelihood-judged item costs: the full model plus one candidate, before and after one "
             f"prefill ({args.model})", "",
             f"- command: `{command.strip()}`",
             f"- hardware: {hardware.hardware_id}, {dtype_of(model)}; "
             f"versions: poptune {v.get('poptune')}, torch {v.get('torch')}, "
             f"transformers {v.get('transformers')}",
             f"- items: fresh items (positions 32 on), batch 8, in chunks of {args.per_chunk}, the two ways back to "
             f"back in every chunk, order alternating; nothing cached between ways; wall time "
             f"{(time.perf_counter() - began) / 60:.1f} min",
             "- before: generation to the token limit, then a scoring prefill, on each side; after: as a study "
             "scores, each side's score from its generation's prefill and one forward over the full answer "
             "(`poptune/engine/speculate.py: generate_own_scored, generate_scored`), the candidate's layers below "
             "its block replayed from the full model's (state reuse), rows ended at their stop text",
             f"- null check: the full model's and the candidate's likelihoods within {args.tolerance:g} both ways "
             f"(largest difference {widest:.2g}), and " + (
                 f"answers and grades the same on every item but {len(rounded)} "
                 f"({', '.join(f'{side} {i}' for side, i in rounded) or 'none'}; {dtype_of(model)}: "
                 "a one-token step and a longer forward round apart where two tokens nearly tie)" if half else
                 "the same answers and grades on every item") + " (the run stops otherwise)", "",
             "| task | candidate | items | before s/item | after s/item | before/after (sums) | per chunk: median "
             "[range] |", "| --- | --- | ---: | ---: | ---: | ---: | --- |", *rows, "",
             "The machine is shared: ratios are measured side by side; absolute times are indicative."]
    name = "gemma-3-270m" if args.model == "gemma-3" else args.model
    out = args.out or ROOT / "leaderboards" / f"likelihood-item-cost-{name}-{hardware.hardware_id}.md"
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
