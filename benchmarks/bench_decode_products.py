"""Benchmark: greedy generation with a decode step's few-row products streamed, against ``F.linear``'s (bfloat16, CPU).

On a CPU with AMX, in bfloat16 (a study's precision there), :mod:`poptune.models.head` takes the LM head's product
for up to 32 rows as ``weight @ rows.T`` (:func:`~poptune.models.head.streamed`), and the stacked decode of several
configurations (:mod:`poptune.engine.joint`) takes every linear product so: the same sums as ``F.linear``, bit for
bit, in less time. This times both ways side by side in one process, interleaved, on real-text prompts:

- **engine**: one POP configuration's own greedy ``generate`` (what a search trial and the per-configuration
  engine pay), the head streamed;
- **stack**: the full model and 8 configurations generated together (``generate_together``: each one's prefill,
  then their decode steps stacked), what a shared trunk pays per batch.

``plain`` is the code before the streamed products (the head's ``F.linear``; the stack's ``F.linear`` up to 32
rows); ``streamed`` is the code as it is. Null check: both ways give every configuration the same tokens.

Usage::

    python benchmarks/bench_decode_products.py [--length 2048] [--batch 2] [--new 32] [--repeats 3]

Writes ``leaderboards/decode-products-gemma-3-270m-<hardware>.md`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

import poptune.device
from poptune import PopConfig, load_model
from poptune.device import dtype_of
from poptune.engine import apply_pop
from poptune.engine.joint import generate_together
from poptune.engine.segments import generate
from poptune.measure.hardware import fingerprint
from poptune.measure.provenance import typed_command, versions
from poptune.measure.timing_prompts import prompt_batch

ROOT = Path(__file__).resolve().parents[1]

CANDIDATE = PopConfig(skip=5, boundary="window-64")
EIGHT = [PopConfig(skip=4, boundary="window-64"), CANDIDATE, PopConfig(skip=6), PopConfig(skip=6, boundary="window-64"),
         PopConfig(skip=7, boundary="window-64"), PopConfig(skip=9, boundary="window-64"),
         PopConfig(skip=5, boundary="window-64", offset=1), PopConfig(skip=6, boundary="window-64", kv="anchor")]


@contextlib.contextmanager
def _products(way: str) -> Iterator[None]:
    """``plain``: the few-row products as before they were streamed (the AMX probe read as absent); else as is."""
    if way == "streamed":
        yield
        return
    real = poptune.device.native_bf16
    poptune.device.native_bf16 = lambda: False
    try:
        yield
    finally:
        poptune.device.native_bf16 = real


def _scenarios(model: Any, inputs: dict[str, Any], new: int) -> dict[str, Callable[[], list[torch.Tensor]]]:
    settings = dict(max_new_tokens=new, pad_token_id=model.generation_config.pad_token_id or 0, do_sample=False)

    def engine() -> list[torch.Tensor]:
        with apply_pop(model, CANDIDATE), torch.no_grad():
            return [generate(model, inputs, **settings)]

    def stack() -> list[torch.Tensor]:
        with torch.no_grad():
            out = generate_together(model, inputs, [PopConfig(skip=0), *EIGHT], **settings)
        assert out is not None, "the stack needs greedy generation without processors"
        return out

    return {"engine: 5/window-64/0's own generate": engine, "stack: full + 8 configurations together": stack}


def _times(fn: Callable[[], list[torch.Tensor]], repeats: int, name: str) -> dict[str, Any]:
    """Seconds of each way's ``repeats`` runs of ``fn`` (interleaved, order alternating), and the tokens."""
    with _products("streamed"):
        want = fn()  # warm, and the tokens both ways must give
    times: dict[str, Any] = {"plain": [], "streamed": [], "tokens": want}
    for k in range(repeats):
        for way in (("plain", "streamed") if k % 2 == 0 else ("streamed", "plain")):
            with _products(way):
                start = time.perf_counter()
                got = fn()
                times[way].append(time.perf_counter() - start)
            if any(not torch.equal(a, b) for a, b in zip(got, want)):
                raise SystemExit(f"{name}: the {way} products gave other tokens")
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="gemma-3")
    parser.add_argument("--length", type=int, default=2048, help="prompt tokens")
    parser.add_argument("--batch", type=int, default=2, help="prompts per generation")
    parser.add_argument("--new", type=int, default=32, help="most new tokens per prompt")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved pairs per scenario")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    model, tok = load_model(args.model)
    if dtype_of(model) != "bfloat16" or not poptune.device.native_bf16():
        print("the streamed products apply in bfloat16 on a CPU with AMX; this one runs "
              f"{dtype_of(model)}{'' if poptune.device.native_bf16() else ' without AMX'}", file=sys.stderr)
        return 2
    inputs = prompt_batch(tok, args.length, args.batch)
    began = time.perf_counter()
    rows = []
    whole, first = _scenarios(model, inputs, args.new), _scenarios(model, inputs, 1)
    for name in whole:
        times = {part: _times(fns[name], args.repeats, name) for part, fns in (("whole", whole), ("first", first))}
        tokens = sum(int(seq.shape[1]) - args.length for seq in times["whole"]["tokens"]) * args.batch
        for part, label in (("whole", f"{tokens} tokens"), ("first", "prefill and first token only")):
            plain, streamed = times[part]["plain"], times[part]["streamed"]
            ratios = [a / b for a, b in zip(plain, streamed)]
            rows.append(f"| {name} | {label} | {statistics.median(plain):.2f} | {statistics.median(streamed):.2f} | "
                        f"**{statistics.median(ratios):.2f}x** [{min(ratios):.2f}, {max(ratios):.2f}] |")
            print(rows[-1], file=sys.stderr, flush=True)
        steps = [(a - c, b - d) for a, b, c, d in zip(times["whole"]["plain"], times["whole"]["streamed"],
                                                        times["first"]["plain"], times["first"]["streamed"])]
        rows.append(f"| {name} | the rest: decode steps (difference) | {statistics.median(a for a, _ in steps):.2f} | "
                    f"{statistics.median(b for _, b in steps):.2f} | "
                    f"**{statistics.median(a / b for a, b in steps):.2f}x** |")
    hardware = fingerprint(model.device)
    v = versions()
    command = typed_command(["benchmarks/bench_decode_products.py", *(argv if argv is not None else sys.argv[1:])],
                            program=None)
    text = "\n".join([
        f"# Greedy generation with a decode step's few-row products streamed ({args.model}, bfloat16, CPU)", "",
        f"- command: `{command.strip()}`",
        f"- hardware: {hardware.hardware_id}, {dtype_of(model)}; versions: poptune {v.get('poptune')}, torch "
        f"{v.get('torch')}, transformers {v.get('transformers')}; wall time {(time.perf_counter() - began) / 60:.1f} "
        "min",
        f"- prompts: {args.batch} of {args.length} real-text tokens; at most {args.new} new tokens each (greedy); "
        f"{args.repeats} interleaved pairs per scenario and part, order alternating; seconds are medians, the ratio "
        "is the pairs' median with their range; the decode steps' figure is each pair's whole run less its prefill "
        "run (the k-th of each), so noisier",
        "- plain: the products before they were streamed (the LM head's `F.linear`, the stack's `F.linear` up to 32 "
        "rows); streamed: `poptune.models.head.streamed` (the head up to 32 rows, the stack's every product)",
        "- null check: both ways gave every configuration the same tokens (the run stops otherwise)", "",
        "| scenario | generated | plain s | streamed s | plain / streamed [range] |",
        "| --- | ---: | ---: | ---: | --- |",
        *rows, "",
        "Ratios are measured side by side in one process; absolute times are indicative (a shared machine).", ""])
    name = "gemma-3-270m" if args.model == "gemma-3" else args.model
    out = Path(args.out) if args.out else ROOT / "leaderboards" / f"decode-products-{name}-{hardware.hardware_id}.md"
    out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
