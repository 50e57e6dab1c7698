"""Benchmark: are the baselines' layer choices stable across calibration seeds?

For each seed: ShortGPT's Block Influence of every layer (and the k lowest), SLEB's greedy removal order (k
layers), the angular-distance block and LaCo's merges, all at k = round(ratio * L), on windows of WikiText-2
drawn with that seed. Reports the orders side by side and how much the removed sets agree.

Usage::

    python benchmarks/baseline_orders.py --model gemma-3 --seeds 0,1 --ratio 0.3333 --data-dir ../shared/data

Writes ``leaderboards/baseline-orders-<model>.md``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

from poptune import load_model
from poptune.baselines import build_baseline
from poptune.data import data_dir
from poptune.kvfit.calibration import CalibrationSpec
from poptune.measure.hardware import fingerprint
from poptune.measure.provenance import typed_command, versions

ROOT = Path(__file__).resolve().parents[1]
METHODS = ("shortgpt", "sleb", "angular", "laco")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--ratio", type=float, default=1 / 3)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--data-dir", help="data directory with wikitext-2 (default: $POPTUNE_DATA; else generated)")
    args = parser.parse_args()

    model, tokenizer = load_model(args.model)
    directory = data_dir(args.data_dir)
    seeds = [int(s) for s in args.seeds.split(",")]
    results: dict[str, dict[int, dict]] = {m: {} for m in METHODS}
    seconds: dict[str, float] = {}
    for seed in seeds:
        spec = CalibrationSpec(samples=args.samples, length=args.length, seed=seed,
                               data_dir=str(directory) if directory else None)
        for method in METHODS:
            start = time.perf_counter()
            results[method][seed] = build_baseline(model, tokenizer, method, args.ratio, spec).details
            seconds[method] = seconds.get(method, 0.0) + time.perf_counter() - start
            print(f"seed {seed} {method}: removed {results[method][seed]['removed']} "
                  f"(order {results[method][seed].get('order')})", flush=True)

    first = results["shortgpt"][seeds[0]]
    source = first["calibration"]["source"]
    num_layers = len(first["scores"])
    lines = [f"# Baseline layer choices on {args.model} across calibration seeds", "",
             f"k = round({args.ratio:.4f} x {num_layers}) = {len(first['removed'])} layers; calibration "
             f"{args.samples} x {args.length} tokens per seed from `{source}`.", "",
             "| method | " + " | ".join(f"seed {s}: removed (order)" for s in seeds) + " | same set |",
             "|---|" + "---|" * len(seeds) + "---|"]
    for method in METHODS:
        sets = [set(results[method][s]["removed"]) for s in seeds]
        cells = []
        for s in seeds:
            d = results[method][s]
            order = d.get("order") or [m["merged"] for m in d.get("merges", [])]
            cells.append(f"{d['removed']} ({order})")
        same = all(x == sets[0] for x in sets)
        overlap = len(set.intersection(*sets))
        lines.append(f"| {method} | " + " | ".join(cells) + f" | {'yes' if same else f'no ({overlap} shared)'} |")
    lines += ["", "Block Influence per layer (ShortGPT; lower = more redundant):", "",
              "| layer | " + " | ".join(f"BI seed {s}" for s in seeds) + " |", "|---:|" + "---:|" * len(seeds)]
    for layer in range(num_layers):
        lines.append(f"| {layer} | " + " | ".join(f"{results['shortgpt'][s]['scores'][layer]:.4f}" for s in seeds)
                     + " |")
    laco = {s: results["laco"][s].get("threshold") for s in seeds}
    lines += ["", f"LaCo thresholds used: {laco}. SLEB NLL after each removal: "
              + "; ".join(f"seed {s}: {[round(x, 3) for x in results['sleb'][s]['nll']]}" for s in seeds), "",
              "## Provenance", "",
              f"- command: `{typed_command(['benchmarks/baseline_orders.py', *sys.argv[1:]], program=None)}`",
              f"- hardware: {fingerprint('cpu').hardware_id}; versions: "
              + ", ".join(f"{k} {v}" for k, v in sorted(versions().items())),
              "- time to choose (all seeds): " + ", ".join(f"{m} {t:.0f} s" for m, t in seconds.items()),
              f"- date: {dt.datetime.now(dt.timezone.utc).isoformat(timespec='seconds')}", ""]
    out = ROOT / "leaderboards" / f"baseline-orders-{args.model}.md"
    out.write_text("\n".join(lines))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
