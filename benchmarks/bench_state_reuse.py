"""Benchmark: a study trial's accuracy cost with prefix-state reuse against the plain POP path.

On the same long prompts (SQuAD, 5-shot, about 1,100 Gemma tokens), POP with ``--skip`` answers each item by
greedy generation (what a trial's accuracy measurement does), once on the plain path and once replaying the
layers before the block from the full model's stored states (:mod:`poptune.prefix`); the two are interleaved
item by item, alternating which goes first. The full model's own pass, which records the states, is paid once
per study and reported separately. Null check: both paths must generate the same tokens on every item.

Usage::

    python benchmarks/bench_state_reuse.py --data-dir ../shared/data [--items 16] [--skip 6]

Writes ``leaderboards/state-reuse-<model>.md``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch

from poptune import PopConfig, apply_pop, load_model
from poptune.measure.bench import versions
from poptune.measure.hardware import fingerprint
from poptune.prefix import PrefixStates

ROOT = Path(__file__).resolve().parents[1]


def _generate(model, ids, tokens: int) -> tuple[list[int], float]:
    start = time.perf_counter()
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=tokens, do_sample=False)
    return out[0, ids.shape[1]:].tolist(), time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="gemma-3")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--items", type=int, default=16)
    parser.add_argument("--skip", type=int, default=6)
    parser.add_argument("--tokens", type=int, default=8, help="new tokens per answer (default: 8)")
    parser.add_argument("--out", default=str(ROOT / "leaderboards"))
    args = parser.parse_args(argv)

    rows = [json.loads(line) for line in (Path(args.data_dir) / "longctx" / "squad.jsonl").open()][: args.items]
    model, tok = load_model(args.model)
    prompts = [tok(r["context"], return_tensors="pt")["input_ids"] for r in rows]
    states = PrefixStates(max_bytes=8 << 30)
    config = PopConfig(skip=args.skip)
    plain_s, reuse_s, same = [], [], 0
    with torch.inference_mode():
        record_start = time.perf_counter()
        with states.attached(model), apply_pop(model, PopConfig(skip=0)):
            for ids in prompts:
                _generate(model, ids, args.tokens)
        record_s = time.perf_counter() - record_start
        with apply_pop(model, config):
            for i, ids in enumerate(prompts):
                _generate(model, ids, 1)  # warm-up of this prompt's shapes, not counted
                order = ("plain", "reuse") if i % 2 == 0 else ("reuse", "plain")
                answers = {}
                for side in order:
                    if side == "reuse":
                        with states.attached(model):
                            answers[side], seconds = _generate(model, ids, args.tokens)
                        reuse_s.append(seconds)
                    else:
                        answers[side], seconds = _generate(model, ids, args.tokens)
                        plain_s.append(seconds)
                same += answers["plain"] == answers["reuse"]
    ratios = [r / p for p, r in zip(plain_s, reuse_s)]
    import numpy as np
    from scipy import stats

    ci = stats.bootstrap((np.array(ratios),), np.median, n_resamples=2000, method="percentile",
                         rng=np.random.default_rng(0)).confidence_interval
    tokens = statistics.median(p.shape[1] for p in prompts)
    hardware = fingerprint("cpu")
    lines = [
        f"# Accuracy cost of a trial with prefix-state reuse: {args.model}, skip {args.skip}",
        "",
        f"- command: `python benchmarks/{Path(__file__).name} {shlex.join(sys.argv[1:] if argv is None else argv)}`",
        f"- hardware: {hardware.hardware_id}; versions: "
        + ", ".join(f"{k} {v}" for k, v in sorted(versions().items())),
        f"- date: {dt.datetime.now(dt.timezone.utc).isoformat(timespec='seconds')}",
        f"- items: the first {len(rows)} SQuAD rows of the long-prompt pack (median {tokens:.0f} prompt tokens), "
        f"greedy, {args.tokens} new tokens, batch 1, interleaved per item (order alternating)",
        "",
        "| path | total s | median s per item |",
        "| --- | ---: | ---: |",
        f"| plain POP prefill + decode | {sum(plain_s):.1f} | {statistics.median(plain_s):.2f} |",
        f"| with reuse (layers before the block replayed) | {sum(reuse_s):.1f} | {statistics.median(reuse_s):.2f} |",
        f"| the full model's recording pass (once per study) | {record_s:.1f} | {record_s / len(rows):.2f} |",
        "",
        f"Cost ratio reuse/plain: median of per-item ratios **{statistics.median(ratios):.3f}** "
        f"(95% bootstrap interval {ci.low:.3f}-{ci.high:.3f}, {len(ratios)} items); "
        f"total {sum(reuse_s) / sum(plain_s):.3f}. Target: <= 0.333.",
        f"Null check: identical generated tokens on {same} of {len(rows)} items (must be all).",
        f"States held: {len(states)} prompts, {states.bytes / 2**20:.0f} MiB.",
        "",
        "The machine is a shared 2-core CPU: ratios are measured side by side; absolute times are indicative.",
    ]
    text = "\n".join(lines) + "\n"
    out = Path(args.out) / f"state-reuse-{args.model}.md"
    out.write_text(text)
    print(text)
    return 0 if same == len(rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
