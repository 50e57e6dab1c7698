"""Benchmark: what SLEB's and LaCo's calibration searches cost, each candidate from its own layer's input or whole.

Removing (SLEB) or merging into (LaCo) a layer leaves every layer below it unchanged, so a search step runs the
model as it is once, keeping every layer's input (``poptune.kvfit.calibration.layer_inputs``), and each candidate
runs only the layers from its own up (``reuse=True``, what ``build_baseline`` does); ``reuse=False`` runs every
candidate's whole forward (before). Both ways back to back, the order alternating over seeds; the run stops
unless both choose the same layers with the same losses and similarities, bit for bit.

Usage::

    python benchmarks/bench_baseline_search.py --model gemma-3 --data-dir ../shared/data --seeds 0

Writes ``leaderboards/baseline-search-cost-<model>-<hardware>.md``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

from poptune import load_model
from poptune.baselines import laco_merges, layer_count, sleb_order
from poptune.data import data_dir
from poptune.engine import decoder_of
from poptune.files import safe_name
from poptune.kvfit.calibration import CalibrationSpec, calibration, calibration_nll
from poptune.measure.hardware import fingerprint
from poptune.measure.provenance import typed_command, versions
from poptune.models import resolve_model

ROOT = Path(__file__).resolve().parents[1]


def _sleb(model, calib, k: int, reuse: bool) -> tuple:
    return tuple(sleb_order(model, calib, k, reuse=reuse))  # (removed in order, NLL after each)


def _laco(model, calib, k: int, reuse: bool) -> tuple:
    removal, info = laco_merges(model, calib, k, reuse=reuse)
    return list(removal.removed), sorted(removal.replaced), info  # info: every merge with its similarity


SEARCHES = {"sleb": _sleb, "laco": _laco}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3")
    parser.add_argument("--seeds", default="0", help="calibration seeds, comma-separated")
    parser.add_argument("--ratio", type=float, default=1 / 3, help="share of the layers removed (k = round)")
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--data-dir", help="data directory with wikitext-2 (default: $POPTUNE_DATA; else generated)")
    parser.add_argument("--out", default=str(ROOT / "leaderboards"))
    args = parser.parse_args(argv)

    began = time.perf_counter()
    model, tokenizer = load_model(args.model)
    directory = data_dir(args.data_dir)
    seeds = [int(s) for s in args.seeds.split(",")]
    layers = len(decoder_of(model).layers)
    seconds: dict[str, dict[bool, float]] = {m: {True: 0.0, False: 0.0} for m in SEARCHES}
    chosen: dict[str, list[str]] = {m: [] for m in SEARCHES}
    source = ""
    for n, seed in enumerate(seeds):
        spec = CalibrationSpec(samples=args.samples, length=args.length, seed=seed,
                               data_dir=str(directory) if directory else None)
        calib = calibration(model, tokenizer, spec)
        source = calib.source
        if n == 0:
            calibration_nll(model, calib)  # untimed: the process's first forward pays its one-time costs
        for method, search in SEARCHES.items():
            k = layer_count(args.ratio, layers, method)
            outs = {}
            for reuse in ((True, False) if n % 2 == 0 else (False, True)):
                start = time.perf_counter()
                outs[reuse] = search(model, calib, k, reuse)
                spent = time.perf_counter() - start
                seconds[method][reuse] += spent
                print(f"seed {seed} {method} reuse={reuse}: {spent:.1f} s", flush=True)
            if outs[True] != outs[False]:
                print(f"seed {seed} {method}: the two ways differ: {outs[True]} != {outs[False]}", file=sys.stderr)
                return 1
            chosen[method].append(f"seed {seed}: {outs[True][0]}")

    hardware = fingerprint("cpu").hardware_id
    name = resolve_model(args.model).name
    wall = time.perf_counter() - began
    command = typed_command(["benchmarks/bench_baseline_search.py", *(sys.argv[1:] if argv is None else argv)],
                            program=None)
    lines = [f"# What the baselines' calibration searches cost ({name})", "", f"- command: `{command}`",
             f"- hardware: {hardware}; versions: " + ", ".join(f"{k} {v}" for k, v in sorted(versions().items())),
             f"- date: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC; wall time of the benchmark "
             f"{wall / 60:.1f} min",
             f"- calibration: {args.samples} x {args.length} tokens per seed from `{source}`; seeds {args.seeds}; "
             f"k = round({args.ratio:.4f} x {layers}) layers",
             "- before: every candidate's whole forward (`reuse=False`); after: each search step runs the model as it "
             "is once and keeps every layer's input, each candidate runs from its own layer up (`reuse=True`, "
             "what `build_baseline` does); both ways back to back, order alternating over seeds",
             "- null check: both ways chose the same layers with the same losses (SLEB) and similarities (LaCo), "
             "compared exactly (the run stops otherwise)", "",
             "| search | before s | after s | before/after | chosen |", "|---|---:|---:|---:|---|"]
    for method in SEARCHES:
        before, after = seconds[method][False], seconds[method][True]
        lines.append(f"| {method} | {before:.1f} | {after:.1f} | **{before / after:.2f}x** | "
                     f"{'; '.join(chosen[method])} |")
    lines += ["", "SLEB's candidates each still pay the LM head over every calibration token (the loss needs the "
              "whole vocabulary's normaliser), which reusing the layers below cannot save; LaCo's compare hidden "
              "states only. The machine is shared: ratios are side by side, absolute times indicative.", ""]
    out = Path(args.out) / f"baseline-search-cost-{safe_name(name)}-{safe_name(hardware)}.md"
    out.write_text("\n".join(lines))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
