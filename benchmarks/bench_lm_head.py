"""Benchmark: the LM head's product for a few rows on this CPU, ``F.linear`` against ``weight @ hidden.T``.

A decode step asks the LM head (``V x C``, Gemma 3: 262,144 x 640) for a few rows' logits. This times both ways
of that float32 product side by side in one process, interleaved, for each row count, with the largest
difference of their logits: :mod:`poptune.models.head` takes ``weight @ hidden.T`` up to ``MAX_ROWS`` rows.

Usage::

    python benchmarks/bench_lm_head.py [--vocab 262144] [--width 640] [--repeats 7]

Writes ``leaderboards/lm-head-gemma-3-270m-<hardware>.md`` (or ``--out``): the default shape is Gemma-3-270M's head.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch

from poptune.measure.hardware import fingerprint
from poptune.measure.provenance import versions
from poptune.models.head import MAX_ROWS

ROOT = Path(__file__).resolve().parents[1]
ROWS = (1, 2, 4, 8, 10, 16, 18, 32, 64, 128, 256, 512)


def _model(args: argparse.Namespace) -> str:
    """The model whose head has this shape (the file's name), else the shape itself."""
    return "gemma-3-270m" if (args.vocab, args.width) == (262144, 640) else f"head-{args.vocab}x{args.width}"


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _row(weight: torch.Tensor, m: int, repeats: int) -> str:
    """The table's row for ``m`` rows: both ways' median milliseconds, the ratio of each interleaved pair (median and
    range), their logits' difference."""
    x = torch.randn(m, weight.shape[1])

    def linear() -> torch.Tensor:
        return torch.nn.functional.linear(x, weight)

    def product() -> torch.Tensor:
        return torch.mm(weight, x.T).T.contiguous()

    linear(), product()  # warm
    times: dict[str, list[float]] = {"linear": [], "rows": []}
    for _ in range(repeats):  # interleaved: this shared machine drifts
        times["linear"].append(_seconds(linear))
        times["rows"].append(_seconds(product))
    a, b = (statistics.median(times[k]) * 1000 for k in ("linear", "rows"))
    ratios = [x / y for x, y in zip(times["linear"], times["rows"])]
    diff = (linear() - product()).abs().max().item()
    return (f"| {m} | {a:.1f} | {b:.1f} | **{statistics.median(ratios):.2f}x** [{min(ratios):.2f}, {max(ratios):.2f}] "
            f"| {diff:.1e} | "
            f"{'weight @ hidden.T' if m <= MAX_ROWS else 'F.linear'} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", type=int, default=262144)
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    weight = torch.randn(args.vocab, args.width) * 0.03
    rows = []
    began = time.perf_counter()
    for m in ROWS:
        rows.append(_row(weight, m, args.repeats))
        print(rows[-1], file=sys.stderr, flush=True)
    hardware = fingerprint(torch.device("cpu"))
    v = versions()
    given = list(argv if argv is not None else sys.argv[1:])
    if args.out:
        given = [a.replace(args.out, "OUT") for a in given]
    text = "\n".join([
        "# The LM head's product for a few rows: `F.linear` against `weight @ hidden.T` (float32, CPU)", "",
        f"- command: `{('python benchmarks/bench_lm_head.py ' + shlex.join(given)).strip()}`",
        f"- hardware: {hardware.hardware_id}; versions: torch {v.get('torch')}, poptune {v.get('poptune')}; "
        f"{torch.get_num_threads()} threads",
        f"- the product: rows x {args.width} by {args.width} x {args.vocab}"
        f"{' (Gemma 3' + chr(39) + 's LM head)' if _model(args) == 'gemma-3-270m' else ''}, random weights; "
        f"{args.repeats} interleaved pairs of the two ways per row count: milliseconds are medians, the ratio is the "
        f"pairs' median with their range; wall time {time.perf_counter() - began:.0f} s",
        f"- used: what `poptune.models.head.RowsHead` takes at that many rows (up to MAX_ROWS = {MAX_ROWS})", "",
        "| rows | F.linear ms | weight @ hidden.T ms | ratio [range] | max abs logit difference | used |",
        "| ---: | ---: | ---: | --- | ---: | --- |",
        *rows, "",
        "Ratios are measured side by side in one process; absolute times are indicative (a shared machine).", ""])
    out = Path(args.out) if args.out else ROOT / "leaderboards" / f"lm-head-{_model(args)}-{hardware.hardware_id}.md"
    out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
