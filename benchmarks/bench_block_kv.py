"""Benchmark: the skipped block's K/V from one product against the per-layer write (today's engine), side by side.

For one model (default: the embedded Gemma-3-270M, the last ``skip`` layers skipped, boundary ``last``), at each
prompt length, two pairs timed in one process, interleaved in balanced A-B/B-A blocks (``poptune.measure``):

1. **the K/V write alone**: every skipped layer's pruned tokens' K/V into a fresh cache, from the same block-entry
   state and cos/sin (caught from a real prefill) -- per layer (``poptune.kv.project.write_prompt_kv``: norm, two
   projections, key norm, RoPE, per layer) against one product (``poptune.kv.block_kv``: one norm, one GEMM with the
   norm weights folded in, one key norm, one RoPE per rotary group);
2. **the whole POP prefill** (time to the first token's logits) with today's engine (per-layer K/V writes, a new
   ``(B, N, C)`` concatenation per skipped layer) against the product (and one tensor written in place through
   the block).

Ratio = median of per-pair (per-layer / product) times, with its 95% interval. Usage::

    python benchmarks/bench_block_kv.py [--model gemma-3] [--skip 6] [--lengths 512,2048] [--min-seconds 8]

Writes ``leaderboards/block-kv-<model>-<hardware-id>.md`` and its raw pairs under ``leaderboards/raw/``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

import poptune.engine.block as block
import poptune.kv.block_kv as block_kv
from poptune import PopConfig, apply_pop, load_model
from poptune.engine import decoder_of
from poptune.kv import project
from poptune.measure import RepeatPolicy
from poptune.measure.hardware import fingerprint
from poptune.measure.provenance import typed_command
from poptune.measure.timer import PairRecord, Timer, measure_pair
from poptune.measure.timing_prompts import prompt_batch
from poptune.models import resolve_model

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def todays_engine() -> Iterator[None]:
    """The engine as it was before the product: per-layer K/V writes, a new concatenation per skipped layer."""
    plan, hooked = block_kv.plan, block._hooked
    block_kv.plan, block._hooked = (lambda *args: None), (lambda layers: True)
    try:
        yield
    finally:
        block_kv.plan, block._hooked = plan, hooked


def _block_inputs(model: Any, inputs: dict[str, Any], skipped: range) -> tuple[torch.Tensor, list[Any]]:
    """The block-entry state (B, P, C) of the pruned tokens and each skipped layer's cos/sin, from one prefill."""
    layers = decoder_of(model).layers
    seen: dict[int, Any] = {}
    hooks = [layers[i].register_forward_pre_hook(
        lambda m, args, kwargs, i=i: seen.update({i: (args[0], kwargs["position_embeddings"])}), with_kwargs=True)
        for i in skipped]
    try:
        with torch.no_grad():
            model(**inputs, logits_to_keep=1)
    finally:
        for hook in hooks:
            hook.remove()
    pruned = inputs["input_ids"].shape[1] - 1
    entry = seen[skipped[0]][0][:, :pruned].contiguous()
    return entry, [(cos[:, :pruned], sin[:, :pruned]) for _, (cos, sin) in (seen[i] for i in skipped)]


def _kv_pair(model: Any, inputs: dict[str, Any], skip: int, policy: RepeatPolicy) -> tuple[PairRecord, float]:
    """The K/V write of the whole block: the product (A) against per layer (B); and the largest difference of the
    K/V the two write."""
    from transformers import DynamicCache

    decoder = decoder_of(model)
    skipped = range(len(decoder.layers) - skip, len(decoder.layers))
    entry, cos_sin = _block_inputs(model, inputs, skipped)
    layers = [decoder.layers[i] for i in skipped]
    config = model.config.get_text_config()

    def per_layer() -> Any:
        cache = DynamicCache(config=config)
        for layer, pe in zip(layers, cos_sin):
            project.write_prompt_kv(layer, entry, pe, cache)
        return cache

    def product() -> Any:
        cache = DynamicCache(config=config)
        fused = block_kv.plan(decoder, skipped)
        assert fused is not None
        for layer, pe in zip(layers, cos_sin):
            assert fused.write(layer, entry, pe, cache)
        return cache

    with torch.no_grad():
        a, b = product(), per_layer()
        diffs = [float((x - y).abs().max()) for i in skipped
                 for x, y in ((a.layers[i].keys, b.layers[i].keys), (a.layers[i].values, b.layers[i].values))]
        return measure_pair(product, per_layer, timer=Timer("cpu"), policy=policy), max(diffs)


def _prefill_pair(model: Any, inputs: dict[str, Any], skip: int, policy: RepeatPolicy) -> tuple[PairRecord, float]:
    """POP's whole prefill: with the product (A) against today's engine (B); and the largest difference of their
    logits."""

    def run() -> None:
        model(**inputs, logits_to_keep=1)

    def today() -> None:
        with todays_engine():
            run()

    with apply_pop(model, PopConfig(skip)), torch.no_grad():
        a = model(**inputs, logits_to_keep=1).logits
        with todays_engine():
            b = model(**inputs, logits_to_keep=1).logits
        return measure_pair(run, today, timer=Timer("cpu"), policy=policy), float((a - b).abs().max())


def _row(name: str, length: int, measured: tuple[PairRecord, float]) -> dict[str, Any]:
    pair, diff = measured
    ci = pair.speedup_ci
    return {"what": name, "length": length, "per_layer_ms": pair.b.p50, "product_ms": pair.a.p50,
            "ratio": pair.speedup, "lo": ci.lo, "hi": ci.hi, "pairs": pair.count, "max_diff": diff,
            "raw": pair.to_dict()}


def _markdown(meta: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    lines = [
        f"# The skipped block's K/V in one product: {meta['model']} on {meta['hardware']}",
        "",
        f"POP with the last {meta['skip']} of {meta['layers']} layers skipped, boundary `last`, batch 1, "
        f"{meta['dtype']}. Each row is a pair timed side by side in one process (balanced A-B/B-A blocks): today's "
        "engine (every skipped layer's K/V by its own norm, projections, key norm and RoPE; a new concatenation "
        "of the hidden states per skipped layer) against the product (`poptune/kv/block_kv.py`: one norm, one GEMM "
        "with the norm weights folded in, one key norm, one RoPE per rotary group; one tensor through the block). "
        "Ratio: median of per-pair (today / product) times [95% interval]; times: medians. Max abs difference: "
        "between the two sides' outputs on the row's prompt (the block's cached K/V; the first token's logits).",
        "",
        "| what | prompt tokens | today ms | product ms | ratio [95%] | pairs | max abs difference |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['what']} | {r['length']} | {r['per_layer_ms']:.2f} | {r['product_ms']:.2f} | "
                     f"{r['ratio']:.3f}x [{r['lo']:.3f}, {r['hi']:.3f}] | {r['pairs']} | {r['max_diff']:.2e} |")
    lines += ["", "## Provenance", "", f"- command: `{meta['command']}`", f"- date: {meta['date']}",
              f"- hardware: {meta['hardware_name']} ({meta['hardware']}), torch threads {meta['threads']}; "
              "load average "
              f"at the end (1, 5, 15 min): {meta['load']} (a machine shared with other work)",
              f"- commit: {meta['commit']}", f"- raw pairs: `{meta['raw']}`", ""]
    return "\n".join(lines)


def _commit() -> str:
    import subprocess

    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3")
    parser.add_argument("--skip", type=int, default=6)
    parser.add_argument("--lengths", default="512,2048")
    parser.add_argument("--min-pairs", type=int, default=12)
    parser.add_argument("--min-seconds", type=float, default=8.0)
    parser.add_argument("--rows", default="kv,prefill", help="which pairs: kv (the K/V write), prefill (TTFT)")
    parser.add_argument("--out", default=str(ROOT / "leaderboards"))
    args = parser.parse_args()
    pairs = {"kv": ("K/V write of the block", _kv_pair), "prefill": ("POP prefill (TTFT)", _prefill_pair)}
    chosen = [pairs[name] for name in args.rows.split(",")]
    model, tokenizer = load_model(args.model)
    policy = RepeatPolicy(warmup=2, min_repeats=args.min_pairs, min_seconds=args.min_seconds, order="random")
    rows: list[dict[str, Any]] = []
    for name, pair_of in chosen:  # every length's K/V write first, then the prefills
        for length in (int(n) for n in args.lengths.split(",")):
            inputs = prompt_batch(tokenizer, length)
            rows.append(_row(name, length, pair_of(model, inputs, args.skip, policy)))
            r = rows[-1]
            print(f"{name} at {length}: {r['per_layer_ms']:.2f} / {r['product_ms']:.2f} ms = {r['ratio']:.3f}x "
                  f"[{r['lo']:.3f}, {r['hi']:.3f}] ({r['pairs']} pairs)", file=sys.stderr)
            _write(args, model, rows)  # after every row: a run cut short keeps what it measured


def _write(args: argparse.Namespace, model: Any, rows: list[dict[str, Any]]) -> None:
    hw = fingerprint("cpu")
    stem = f"block-kv-{resolve_model(args.model).name}-{hw.hardware_id}"
    meta = {"model": resolve_model(args.model).name, "hardware": hw.hardware_id, "hardware_name": hw.name,
            "threads": torch.get_num_threads(),
            "load": " ".join(f"{x:.2f}" for x in os.getloadavg()), "skip": args.skip,
            "layers": len(decoder_of(model).layers),
            "dtype": str(next(model.parameters()).dtype).replace("torch.", ""), "commit": _commit(),
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "command": typed_command(["benchmarks/bench_block_kv.py", *sys.argv[1:]], program=None).strip(),
            "raw": f"leaderboards/raw/{stem}.json"}
    out = Path(args.out)
    (out / "raw").mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.md").write_text(_markdown(meta, rows))
    (out / "raw" / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    print(f"wrote {out / stem}.md")


if __name__ == "__main__":
    main()
