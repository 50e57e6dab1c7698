"""Benchmark: a study trial's accuracy cost with prefix-state reuse against the plain POP path.

On the same long prompts (SQuAD, 5-shot, about 1,100 Gemma tokens), POP with ``--skip`` answers each item by
greedy generation as a trial's accuracy measurement does (lm-eval's ``longctx_squad``: stop at the task's
``until`` sequences, at most 50 new tokens, lm-eval's own stopping criteria), once on the plain path and once
as a study runs it: the layers before the block replayed from the full model's stored states
(:mod:`poptune.engine.prefix`) and the decode verified in rounds of one full-depth forward over a proposal: the full
model's own answer while POP's agrees with it, else prompt-lookup n-grams (:mod:`poptune.engine.speculate`). The two are
interleaved item by item,
alternating which goes first. ``--tokens N`` instead generates exactly N tokens. The full model's own pass,
which records the states and the answers, is paid once per study and reported separately. Null check: both
paths must generate the same tokens on every item.

Usage::

    python benchmarks/bench_state_reuse.py --data-dir ../shared/data [--items 16] [--skip 6] [--tokens N]

Writes ``leaderboards/state-reuse-<model>.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from poptune import PopConfig, apply_pop, load_model
from poptune.engine.prefix import PrefixStates
from poptune.engine.speculate import generate
from poptune.evaluate.scoring import score_continuations
from poptune.measure.hardware import fingerprint
from poptune.measure.provenance import typed_command, versions
from poptune.measure.stats import median_ci

ROOT = Path(__file__).resolve().parents[1]


MAX_GEN_TOKS = 50  # longctx_squad.yaml's max_gen_toks


def _score(model, ids, gold: list[int], pad_id: int) -> tuple[float, float]:
    """Seconds and log-likelihood of the gold answer given the prompt, as a trial's ``_bpb`` task scores it."""
    start = time.perf_counter()
    [(loglik, _)] = score_continuations(model, [ids[0].tolist()], [gold], pad_id=pad_id)
    return time.perf_counter() - start, loglik


def _generate(model, ids, tokens: int | None, stop, states: PrefixStates | None = None) -> tuple[list[int], float]:
    """Greedy answer: exactly ``tokens`` new tokens, or as a trial generates (``stop`` criteria, at most 50).

    With ``states``, as a study generates: the full model records its answer, POP verifies it as a draft."""
    stopping = None if tokens is not None else (lambda: stop(ids))
    start = time.perf_counter()
    out = generate(model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, states=states,
                   stopping=stopping, do_sample=False, max_new_tokens=tokens or MAX_GEN_TOKS)
    return out[0, ids.shape[1]:].tolist(), time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="gemma-3")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--items", type=int, default=16)
    parser.add_argument("--skip", type=int, default=6)
    parser.add_argument("--tokens", type=int, default=None,
                        help="exactly this many new tokens per answer (default: the task's stop rule, as a trial)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads (default: torch's own); 1 keeps a loaded machine's threads from waiting on "
                             "each other")
    parser.add_argument("--out", default=str(ROOT / "leaderboards"))
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    rows = [json.loads(line) for line in (Path(args.data_dir) / "longctx" / "squad.jsonl").open()][: args.items]
    model, tok = load_model(args.model)
    prompts = [tok(r["context"], return_tensors="pt")["input_ids"] for r in rows]
    from lm_eval.models.utils_hf import stop_sequences_criteria

    until = rows[0]["until"]

    def stop(ids):
        return stop_sequences_criteria(tok, until, ids.shape[1], 1)

    generated = []
    states = PrefixStates(max_bytes=8 << 30)
    config = PopConfig(skip=args.skip)
    golds = [tok(r["continuation"], add_special_tokens=False)["input_ids"] for r in rows]
    plain_s, reuse_s, same, agree = [], [], 0, 0
    scored = {"plain": [], "reuse": []}  # (seconds, log-likelihood) of the gold answer per item
    with torch.inference_mode():
        record_start = time.perf_counter()
        with states.attached(model), apply_pop(model, PopConfig(skip=0)):
            full_answers = []
            for ids, gold in zip(prompts, golds):
                full_answers.append(_generate(model, ids, args.tokens, stop, states)[0])
                _score(model, ids, gold, tok.pad_token_id)
        record_s = time.perf_counter() - record_start
        with apply_pop(model, config):
            for i, ids in enumerate(prompts):
                _generate(model, ids, 1, stop)  # warm-up of this prompt's shapes, not counted
                order = ("plain", "reuse") if i % 2 == 0 else ("reuse", "plain")
                answers = {}
                for side in order:
                    if side == "reuse":
                        with states.attached(model):
                            answers[side], seconds = _generate(model, ids, args.tokens, stop, states)
                        reuse_s.append(seconds)
                    else:
                        answers[side], seconds = _generate(model, ids, args.tokens, stop)
                        plain_s.append(seconds)
                same += answers["plain"] == answers["reuse"]
                agree += answers["plain"] == full_answers[i]
                generated.append(len(answers["plain"]))
                for side in order:
                    with states.attached(model) if side == "reuse" else contextlib.nullcontext():
                        scored[side].append(_score(model, ids, golds[i], tok.pad_token_id))
    score_plain = [t for t, _ in scored["plain"]]
    score_reuse = [t for t, _ in scored["reuse"]]
    loglik_diff = max(abs(a - b) for (_, a), (_, b) in zip(scored["plain"], scored["reuse"]))
    gen = _ratio(plain_s, reuse_s)
    bpb = _ratio(score_plain, score_reuse)
    both = _ratio([a + b for a, b in zip(plain_s, score_plain)], [a + b for a, b in zip(reuse_s, score_reuse)])
    tokens = statistics.median(p.shape[1] for p in prompts)
    hardware = fingerprint("cpu")
    answers = (f"{args.tokens} new tokens" if args.tokens is not None else
               f"stopping as a trial does (until {until!r} or {MAX_GEN_TOKS} tokens): "
               f"{statistics.mean(generated):.1f} new tokens on average, {min(generated)}-{max(generated)}")
    lines = [
        f"# Accuracy cost of a trial with prefix-state reuse: {args.model}, skip {args.skip}",
        "",
        "- command: `" + typed_command([f"benchmarks/{Path(__file__).name}", *(sys.argv[1:] if argv is None else argv)],
                                        program=None) + "`",
        f"- hardware: {hardware.hardware_id}; versions: "
        + ", ".join(f"{k} {v}" for k, v in sorted(versions().items())),
        f"- date: {dt.datetime.now(dt.timezone.utc).isoformat(timespec='seconds')}",
        f"- items: the first {len(rows)} SQuAD rows of the long-prompt pack (median {tokens:.0f} prompt tokens), "
        f"batch 1, the two paths interleaved per item (order alternating); {torch.get_num_threads()} torch threads, "
        f"load average {os.getloadavg()[0]:.1f} at the end",
        f"- generation (`longctx_squad`): greedy, {answers}; the reuse path verifies the full model's answer as a "
        "draft (rounds of one full-depth forward over a proposal: that answer while POP's agrees with it, else "
        "prompt-lookup n-grams)",
        "- gold answer's log-likelihood (`longctx_squad_bpb`): the context prefilled, the answer scored at full depth",
        "",
        "| scoring | plain s (median per item) | reuse s (median per item) | reuse/plain: median of per-item ratios "
        "[95% CI] | total ratio |",
        "| --- | ---: | ---: | --- | ---: |",
        _row("generation", plain_s, reuse_s, gen),
        _row("gold log-likelihood", score_plain, score_reuse, bpb),
        _row("both (one item of each task)", [a + b for a, b in zip(plain_s, score_plain)],
             [a + b for a, b in zip(reuse_s, score_reuse)], both),
        "",
        f"The full model's recording pass (once per study, both scorings): {record_s:.1f} s, "
        f"{record_s / len(rows):.2f} s per item. Target: reuse/plain <= 0.333.",
        f"Null checks: identical generated tokens on {same} of {len(rows)} items (must be all); largest "
        f"log-likelihood difference {loglik_diff:.1e} nats (must be <= 1e-3).",
        f"States held: {len(states)} prompts, {states.bytes / 2**20:.0f} MiB.",
        f"Drafts: POP's answer equals the full model's on {agree} of {len(rows)} items; {states.drafted} "
        f"generations verified proposals, {states.accepted} proposed tokens accepted "
        f"({states.accepted / max(sum(generated), 1):.0%} of the tokens generated), {states.fallbacks} fell back "
        "to plain generation.",
        "",
        "The machine is a shared 2-core CPU: ratios are measured side by side; absolute times are indicative.",
    ]
    text = "\n".join(lines) + "\n"
    out = Path(args.out) / f"state-reuse-{args.model}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)
    return 0 if same == len(rows) and loglik_diff <= 1e-3 else 1


def _ratio(plain: list[float], reuse: list[float]) -> tuple[float, float, float, float]:
    """Median of the per-item ratios reuse/plain, its 95% order-statistic interval, the total ratio."""
    ratios = [r / p for p, r in zip(plain, reuse)]
    ci = median_ci(ratios)
    low, high = ci.lo, ci.hi
    return statistics.median(ratios), low, high, sum(reuse) / sum(plain)


def _row(name: str, plain: list[float], reuse: list[float], ratio: tuple[float, float, float, float]) -> str:
    median, low, high, total = ratio
    return (f"| {name} | {statistics.median(plain):.2f} | {statistics.median(reuse):.2f} | "
            f"**{median:.3f}** [{low:.3f}, {high:.3f}] ({len(plain)} items) | {total:.3f} |")


if __name__ == "__main__":
    raise SystemExit(main())
