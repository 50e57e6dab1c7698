"""``poptune baseline``: one structured-pruning baseline, measured exactly like a POP configuration."""

from __future__ import annotations

import argparse
import json
from typing import Any

from poptune.baselines.methods import BASELINES, METHODS
from poptune.baselines.methods import method as baseline_method
from poptune.cli._args import (
    PAPER_RATIO,
    add_calibration,
    add_model,
    add_output,
    add_problem,
    calibration_spec,
    check_output_path,
    emit,
    finite,
    problem,
)


def register(sub: Any) -> None:
    parser = sub.add_parser("baseline", help="measure a structured-pruning baseline beside the full model")
    add_model(parser)
    parser.add_argument("--method", required=True, choices=METHODS)
    own = "; ".join(f"{m.ratio_name}: default {m.own_ratio}" for m in BASELINES if m.own_ratio is not None)
    parser.add_argument("--ratio", type=finite, help=f"share of layers removed (default: 1/3; {own})")
    add_problem(parser)
    add_calibration(parser)
    add_output(parser, "the measurement")
    parser.set_defaults(run=run)


def _tables(m: Any) -> str:
    """The tables of a baseline's :class:`~poptune.store.Measurement`."""
    details = m.details
    removed = details.get("removed") or []
    what = f"removed layers {removed}" if removed else f"{100 * details.get('zeros', 0):.1f}% zeros"
    if m.config.skip:
        what = f"skipped in prefill only: layers {m.config.to_dict().get('layers')}"
    lines = [f"{m.method} at ratio {details['ratio']:.3f}: {what}"]
    if details.get("calibration"):
        c = details["calibration"]
        lines.append(f"calibration: {c['samples']} x {c['length']} tokens, seed {c['seed']}, from {c['source']}")
    lines.append(f"{'length':>7}  {'full ms':>9}  {'method ms':>9}  {'speedup':>7}  {'ideal':>6}  "
                 f"{'decode full':>11}  {'decode method':>13}")
    for length, row in m.latency.items():
        decode = (f"{row['decode_full_ms_per_token']:>8.2f} ms  {row['decode_pop_ms_per_token']:>10.2f} ms"
                  if row.get("decode_full_ms_per_token") is not None else "")
        lines.append(f"{length:>7}  {row['full_ms']:>9.1f}  {row['pop_ms']:>9.1f}  {row['speedup']:>6.3f}x  "
                     f"{row['ideal']:>5.2f}x  {decode}")
    lines.append(f"{'task':<14} {'items':>6} {'full':>7} {'method':>7} {'drop':>7}")
    for task, acc in m.accuracy.items():
        full = m.full_accuracy[task]
        lines.append(f"{task:<14} {m.items.get(task, ''):>6} {100 * full:>7.2f} {100 * acc:>7.2f} "
                     f"{100 * (full - acc):>+7.2f}")
    lines.append(f"{'mean':<14} {'':>6} {'':>7} {100 * m.accuracy_mean:>7.2f} {m.drop_points:>+7.2f}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from poptune.baselines.methods import build_baseline, check_ratio
    from poptune.problem.evaluator import ConfigEvaluator

    spec = problem(args)
    calib = calibration_spec(args)
    chosen = baseline_method(args.method)
    ratio = args.ratio if args.ratio is not None else (chosen.own_ratio or PAPER_RATIO)
    check_ratio(ratio, chosen.ratio_name)  # before loading
    if args.out:
        check_output_path(args.out)
    evaluator = ConfigEvaluator(spec)
    baseline = build_baseline(evaluator.model, evaluator.tokenizer, args.method, ratio, calib)
    measurement = evaluator.evaluate_baseline(baseline)
    emit(args, _tables(measurement), json.dumps({**measurement.info(), "model": args.model}, indent=2))
    return 0
