"""Benchmark: multiple-choice scoring with one shared prefill per context vs one full forward per choice.

Times, side by side in one process on the same requests, poptune's stage-aware scorer (``PopLM``, skip=0:
one prefill per context, continuations from a shared cache, LM head only where scores are read) and
lm-eval's plain ``HFLM`` scoring each choice with its own forward over context + continuation
(``logits_cache=False``). Both at the same batch size; the scores are checked to agree.

Usage::

    POPTUNE_DATA=../shared/data python benchmarks/bench_scoring.py [--task hellaswag] [--limit 100]

Writes ``leaderboards/scoring-<model>-<task>.md``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

from lm_eval.api.instance import Instance
from lm_eval.models.huggingface import HFLM

from poptune import load_model
from poptune.evaluate.lm import PopLM
from poptune.evaluate.suite import item_indices
from poptune.evaluate.taskpack import data_dir, get_task_dict
from poptune.measure.hardware import fingerprint
from poptune.measure.provenance import typed_command, versions

ROOT = Path(__file__).resolve().parents[1]


def _requests(task_name: str, limit: int) -> list[Instance]:
    task = get_task_dict([task_name], data_dir())["tasks"][task_name]
    docs = list(task.eval_docs)
    requests = []
    for i in item_indices(len(docs), limit):
        doc = docs[i]
        context = task.doc_to_text(doc)
        for choice in task.doc_to_choice(doc):
            requests.append(Instance(request_type="loglikelihood", doc=doc, arguments=(context, " " + choice), idx=i))
    return requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3")
    parser.add_argument("--task", default="hellaswag")
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds (shared, per-choice, ...)")
    args = parser.parse_args()
    if data_dir() is None:
        sys.exit("set POPTUNE_DATA to the evaluation data directory")

    model, tokenizer = load_model(args.model)
    requests = _requests(args.task, args.limit)
    shared = PopLM(pretrained=model, tokenizer=tokenizer, skip=0, batch_size=args.batch_size)
    plain = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=args.batch_size, device="cpu", logits_cache=False)
    times: dict[str, list[float]] = {"shared": [], "per-choice": []}
    results = {}
    for _ in range(args.rounds):
        for name, lm in (("shared", shared), ("per-choice", plain)):
            start = time.perf_counter()
            results[name] = lm.loglikelihood(requests, disable_tqdm=True)
            times[name].append(time.perf_counter() - start)
    worst = max(abs(a[0] - b[0]) for a, b in zip(results["shared"], results["per-choice"]))
    ratios = sorted(p / s for s, p in zip(times["shared"], times["per-choice"]))
    speedup = ratios[len(ratios) // 2]
    hw = fingerprint("cpu")
    command = typed_command(["benchmarks/bench_scoring.py", *sys.argv[1:]], program=None)
    text = "\n".join([
        f"# Multiple-choice scoring: shared prefill vs per-choice forwards ({args.model}, {args.task})",
        "",
        f"{args.limit} items, {len(requests)} (context, choice) requests, batch {args.batch_size}, "
        f"{args.rounds} interleaved rounds.",
        "",
        "| scorer | seconds per round | requests/s |",
        "|---|---:|---:|",
        *(f"| {name} | {', '.join(f'{t:.1f}' for t in ts)} | {len(requests) / min(ts):.1f} |"
          for name, ts in times.items()),
        "",
        f"Speedup of the shared prefill (median of per-round ratios): **{speedup:.2f}x**. "
        f"Largest log-likelihood difference between the two: {worst:.2e}.",
        "",
        "## Provenance",
        "",
        f"- command: `{command.strip()}`",
        f"- date: {dt.datetime.now(dt.timezone.utc).isoformat(timespec='seconds')}",
        f"- hardware: {hw.name} ({hw.hardware_id})",
        f"- versions: {', '.join(f'{k} {v}' for k, v in versions().items())}",
        "",
    ])
    out = ROOT / "leaderboards" / f"scoring-{args.model}-{args.task}.md"
    out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
