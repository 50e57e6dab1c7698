"""``poptune baseline``: one structured-pruning baseline, measured exactly like a POP configuration."""

from __future__ import annotations

import argparse
import json
from typing import Any

from poptune.baselines.methods import METHODS, WANDA_SPARSITY

from ._args import add_calibration, add_model, add_problem, calibration_spec, problem


def register(sub: Any) -> None:
    parser = sub.add_parser("baseline", help="measure a structured-pruning baseline beside the full model")
    add_model(parser)
    parser.add_argument("--method", required=True, choices=METHODS)
    parser.add_argument("--ratio", type=float, help=f"share of layers removed (default: 1/3; wanda: its sparsity, "
                        f"default {WANDA_SPARSITY})")
    add_problem(parser)
    add_calibration(parser)
    parser.add_argument("--json", action="store_true", help="print the measurement as JSON instead of tables")
    parser.set_defaults(run=run)


def _tables(info: dict[str, Any]) -> str:
    details = info["details"]
    removed = details.get("removed") or []
    what = f"removed layers {removed}" if removed else f"{100 * details.get('zeros', 0):.1f}% zeros"
    if info["config"]["skip"]:
        what = f"skipped in prefill only: layers {info['config'].get('layers')}"
    lines = [f"{info['method']} at ratio {details['ratio']:.3f}: {what}"]
    if details.get("calibration"):
        c = details["calibration"]
        lines.append(f"calibration: {c['samples']} x {c['length']} tokens, seed {c['seed']}, from {c['source']}")
    lines.append(f"{'length':>7}  {'full ms':>9}  {'method ms':>9}  {'speedup':>7}  {'ideal':>6}  "
                 f"{'decode full':>11}  {'decode method':>13}")
    for length, row in info["latency"].items():
        decode = (f"{row['decode_full_ms_per_token']:>8.2f} ms  {row['decode_pop_ms_per_token']:>10.2f} ms"
                  if row.get("decode_full_ms_per_token") is not None else "")
        lines.append(f"{length:>7}  {row['full_ms']:>9.1f}  {row['pop_ms']:>9.1f}  {row['speedup']:>6.3f}x  "
                     f"{row['ideal']:>5.2f}x  {decode}")
    lines.append(f"{'task':<14} {'items':>6} {'full':>7} {'method':>7} {'drop':>7}")
    for task, acc in info["accuracy"].items():
        full = info["full_accuracy"][task]
        lines.append(f"{task:<14} {info['items'].get(task, ''):>6} {100 * full:>7.2f} {100 * acc:>7.2f} "
                     f"{100 * (full - acc):>+7.2f}")
    lines.append(f"{'mean':<14} {'':>6} {'':>7} {100 * info['accuracy_mean']:>7.2f} {info['drop_points']:>+7.2f}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from poptune.baselines.methods import build_baseline, check_ratio
    from poptune.tune.evaluator import ConfigEvaluator

    spec = problem(args)
    calib = calibration_spec(args)
    ratio = args.ratio if args.ratio is not None else (WANDA_SPARSITY if args.method == "wanda" else 1 / 3)
    check_ratio(ratio, "wanda's `ratio` (sparsity)" if args.method == "wanda" else "`ratio`")  # before loading
    evaluator = ConfigEvaluator(spec)
    baseline = build_baseline(evaluator.model, evaluator.tokenizer, args.method, ratio, calib)
    info = evaluator.evaluate_baseline(baseline).info()
    info["model"] = args.model
    print(json.dumps(info, indent=2) if args.json else _tables(info))
    return 0
