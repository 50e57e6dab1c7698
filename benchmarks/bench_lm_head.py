"""Benchmark: the LM head's product for a few rows on this CPU, ``F.linear`` against ``weight @ hidden.T``.

A decode step asks the LM head (``V x C``, Gemma 3: 262,144 x 640) for a few rows' logits. This times both ways
of that product (float32, or ``--dtype bfloat16``) side by side in one process, interleaved, for each row count,
with the largest difference of their logits: :mod:`poptune.models.head` takes ``weight @ hidden.T``
(:func:`~poptune.models.head.streamed`) up to ``MAX_ROWS`` float32 rows, ``BF16_ROWS`` bfloat16 rows on an AMX CPU.

With ``--picks``, the greedy pick of a stacked decode step instead: the streamed product copied into row order and
its argmax, against :func:`~poptune.models.head.streamed_picks` (block by block of the head, no whole copy), for 8 to
72 rows, with whether they pick the same tokens.

Usage::

    python benchmarks/bench_lm_head.py [--vocab 262144] [--width 640] [--repeats 7] [--dtype bfloat16] [--picks]

Writes ``leaderboards/lm-head-gemma-3-270m-<hardware>.md`` (bfloat16: ``lm-head-gemma-3-270m-bfloat16-<hardware>.md``;
or ``--out``): the default shape is Gemma-3-270M's head.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch

from poptune.device import native_bf16
from poptune.measure.hardware import fingerprint
from poptune.measure.provenance import versions
from poptune.models.head import BF16_ROWS, MAX_ROWS, PICK_BLOCK, streamed, streamed_picks

ROOT = Path(__file__).resolve().parents[1]
ROWS = (1, 2, 4, 8, 10, 16, 18, 32, 64, 128, 256, 512)
#: Rows of a stacked decode step (the full model and 8 configurations over batches of 1 to 8).
PICK_ROWS = (8, 16, 32, 72)


def _model(args: argparse.Namespace) -> str:
    """The model whose head has this shape (the file's name), else the shape itself."""
    return "gemma-3-270m" if (args.vocab, args.width) == (262144, 640) else f"head-{args.vocab}x{args.width}"


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _timed_pair(first, second, m: int, repeats: int) -> str:
    """The first cells of a table's row for ``m`` rows: both ways' median milliseconds over ``repeats`` interleaved
    pairs (this shared machine drifts) and the ratio of each pair (median and range), after one warm call each."""
    first(), second()  # warm
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeats):
        times[0].append(_seconds(first))
        times[1].append(_seconds(second))
    a, b = (statistics.median(t) * 1000 for t in times)
    ratios = [x / y for x, y in zip(*times)]
    return f"| {m} | {a:.1f} | {b:.1f} | **{statistics.median(ratios):.2f}x** [{min(ratios):.2f}, {max(ratios):.2f}] "


def _row(weight: torch.Tensor, m: int, repeats: int, limit: int) -> str:
    """The table's row for ``m`` rows: ``F.linear`` against the streamed product (:func:`_timed_pair`), their
    logits' difference, the way the head takes."""
    x = torch.randn(m, weight.shape[1]).to(weight.dtype)

    def linear() -> torch.Tensor:
        return torch.nn.functional.linear(x, weight)

    def product() -> torch.Tensor:
        return streamed(weight, x).contiguous()

    timed = _timed_pair(linear, product, m, repeats)
    diff = (linear().float() - product().float()).abs().max().item()
    return f"{timed}| {diff:.1e} | {'weight @ hidden.T' if m <= limit else 'F.linear'} |"


def _pick_row(weight: torch.Tensor, m: int, repeats: int) -> str:
    """The picks table's row for ``m`` rows: the whole product's pick against the block picks (:func:`_timed_pair`),
    whether they pick the same tokens."""
    x = torch.randn(m, weight.shape[1]).to(weight.dtype)

    def whole() -> torch.Tensor:
        return streamed(weight, x).contiguous().max(dim=-1).indices

    def blocks() -> torch.Tensor:
        return streamed_picks(weight, x)

    timed = _timed_pair(whole, blocks, m, repeats)
    return f"{timed}| {'yes' if torch.equal(whole(), blocks()) else 'NO'} |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", type=int, default=262144)
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--picks", action="store_true", help="time the greedy pick of a stacked step instead")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    weight = (torch.randn(args.vocab, args.width) * 0.03).to(getattr(torch, args.dtype))
    limit = MAX_ROWS if args.dtype == "float32" else (BF16_ROWS if native_bf16() else 0)
    rows = []
    began = time.perf_counter()
    for m in PICK_ROWS if args.picks else ROWS:
        rows.append(_pick_row(weight, m, args.repeats) if args.picks else _row(weight, m, args.repeats, limit))
        print(rows[-1], file=sys.stderr, flush=True)
    hardware = fingerprint(torch.device("cpu"))
    v = versions()
    given = list(argv if argv is not None else sys.argv[1:])
    if args.out:
        given = [a.replace(args.out, "OUT") for a in given]
    command = f"- command: `{('python benchmarks/bench_lm_head.py ' + shlex.join(given)).strip()}`"
    machine = (f"- hardware: {hardware.hardware_id}; versions: torch {v.get('torch')}, poptune {v.get('poptune')}; "
               f"{torch.get_num_threads()} threads")
    wall = time.perf_counter() - began
    if args.picks:
        title = ("A stacked decode step's greedy pick: the whole product copied, against block by block "
                 f"({args.dtype}, CPU)")
        about = [f"- whole: `streamed(weight, rows)` copied into row order, then `max` over the {args.vocab} logits; "
                 f"blocks: `streamed_picks` ({PICK_BLOCK} rows of the head at a time); random weights; {args.repeats} "
                 f"interleaved pairs per row count, medians; wall time {wall:.0f} s",
                 f"- the stacked decode takes blocks in bfloat16 on an AMX CPU (this one has "
                 f"{'AMX' if native_bf16() else 'none'})"]
        header = ["| rows | whole ms | blocks ms | ratio [range] | same tokens |", "| ---: | ---: | ---: | --- | --- |"]
    else:
        title = f"The LM head's product for a few rows: `F.linear` against `weight @ hidden.T` ({args.dtype}, CPU)"
        about = [f"- the product: rows x {args.width} by {args.width} x {args.vocab}"
                 f"{' (Gemma 3' + chr(39) + 's LM head)' if _model(args) == 'gemma-3-270m' else ''}, random weights; "
                 f"{args.repeats} interleaved pairs of the two ways per row count: milliseconds are medians, the ratio "
                 f"is the pairs' median with their range; wall time {wall:.0f} s",
                 "- used: what `poptune.models.head.RowsHead` takes at that many rows (up to "
                 + (f"MAX_ROWS = {MAX_ROWS})" if args.dtype == "float32" else f"BF16_ROWS = {BF16_ROWS} on an AMX CPU; "
                    f"this one has {'AMX' if native_bf16() else 'none'}; one row taken as two, the first kept)")]
        header = ["| rows | F.linear ms | weight @ hidden.T ms | ratio [range] | max abs logit difference | used |",
                  "| ---: | ---: | ---: | --- | ---: | --- |"]
    text = "\n".join([
        f"# {title}", "", command, machine, *about, "", *header, *rows, "",
        "Ratios are measured side by side in one process; absolute times are indicative (a shared machine).", ""])
    name = ("picks-" if args.picks else "") + _model(args) + ("" if args.dtype == "float32" else f"-{args.dtype}")
    out = Path(args.out) if args.out else ROOT / "leaderboards" / f"lm-head-{name}-{hardware.hardware_id}.md"
    out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
