"""Benchmark: per-item scores and cost of long-prompt tasks, full model vs one POP configuration, paired.

Usage::

    python benchmarks/longctx_item_cost.py --data-dir ../shared/data --model gemma-3 --skip 6 \\
        --tasks longctx_squad_bpb,longctx_squad --limit 16 --out /tmp/longctx-cost.json

For each task and each of (full model, POP), one lm-eval run on the same evenly spaced items with per-sample
logs: wall and process CPU seconds (CPU time is steadier than wall time on a shared machine), and every item's
metric values. Prints each metric's mean for full and POP and the paired drop (full minus POP) with a 95%
percentile bootstrap interval (scipy.stats.bootstrap on the per-item differences, seeded), and the cost per item.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np


def _interval(diff: np.ndarray) -> tuple[float, float]:
    from scipy.stats import bootstrap

    if np.all(diff == diff[0]):
        return float(diff[0]), float(diff[0])
    ci = bootstrap((diff,), np.mean, confidence_level=0.95, n_resamples=10_000, method="percentile",
                   random_state=0).confidence_interval
    return float(ci.low), float(ci.high)


def _run(model, tok, skip: int, boundary: str, task: str, data: Path, limit: int) -> dict:
    import lm_eval.evaluator

    from poptune.engine import remove_pop
    from poptune.evaluate.lm import PopLM
    from poptune.evaluate.suite import item_indices
    from poptune.evaluate.taskpack import get_task_dict

    task_dict = get_task_dict([task], data)
    items = item_indices(len(task_dict["tasks"][task].eval_docs), limit)
    lm = PopLM(pretrained=model, tokenizer=tok, skip=skip, boundary=boundary, batch_size=8)
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        out = lm_eval.evaluator.evaluate(lm, task_dict, samples={task: items}, bootstrap_iters=0, log_samples=True,
                                         verbosity="WARNING")
    finally:
        remove_pop(model)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    samples = sorted(out["samples"][task], key=lambda s: s["doc_id"])
    metrics = list(samples[0]["metrics"])
    return {"wall_s": wall, "cpu_s": cpu, "items": [s["doc_id"] for s in samples],
            "per_item": {m: [float(s[m]) for s in samples] for m in metrics}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--model", default="gemma-3")
    parser.add_argument("--skip", type=int, default=6)
    parser.add_argument("--boundary", default="last")
    parser.add_argument("--tasks", default="longctx_squad_bpb,longctx_squad")
    parser.add_argument("--limit", type=int, default=16)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    from poptune.models import load_model

    model, tok = load_model(args.model)
    runs: dict[str, dict] = {}
    for task in args.tasks.split(","):
        for which, skip in (("full", 0), ("pop", args.skip)):
            runs[f"{which}/{task}"] = run = _run(model, tok, skip, args.boundary, task, args.data_dir, args.limit)
            n = len(run["items"])
            print(f"{which:<4} {task:<20} {n} items  wall {run['wall_s']:.1f} s ({run['wall_s'] / n:.2f} s/item)  "
                  f"cpu {run['cpu_s']:.1f} s ({run['cpu_s'] / n:.2f} s/item)", flush=True)
        full, pop = runs[f"full/{task}"], runs[f"pop/{task}"]
        for metric in full["per_item"]:
            a, b = np.array(full["per_item"][metric]), np.array(pop["per_item"][metric])
            low, high = _interval(a - b)
            print(f"  {metric}: full {a.mean():.4f}  POP {b.mean():.4f}  drop {a.mean() - b.mean():+.4f} "
                  f"(95% [{low:+.4f}, {high:+.4f}], n={len(a)}, items changed {int((a != b).sum())})")
    if args.out:
        args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
