"""Benchmark: how many items a likelihood verdict needs on real outcomes, with the counts' fit and the empirical one.

Under ``--judge likelihood`` an item's outcome is continuous (the full answer's mean token probability after a
configuration's prefill), so most items move a little. The score test's variance was once the counts' fit of
Tango's test, each item's move taken for that share of a flip (its absolute difference); it is now the empirical
likelihood over the items' differences and the scale's two ends (:func:`poptune.evaluate.paired.el_moments`),
which rests on the squared moves and is the same fit for 0/1 outcomes. This scores the full model and a few POP
configurations on the first ``--items`` items of each task's fixed order (the study's search items; one shared
trunk per item, :meth:`poptune.problem.evaluator.ConfigEvaluator.sharing`) and reports, per configuration, the
paired drop with its 95% interval both ways (one look) and the items a 2-point verdict needs for 80% power at a
true drop of 0, as a study's plan prints it (:func:`poptune.evaluate.racing.verdict_cost`, the standard
certification's design from 32 items per task): before (the absolute moves) and after (the squared ones).

Usage::

    python benchmarks/likelihood_verdict_cost.py --data-dir ../shared/data [--items 32] [--tasks ...]

Writes ``leaderboards/likelihood-verdict-cost-<model>-<hardware>.md`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CONFIGS = "6/last/0,5/window-64/0,4/window-64/0"


def _config(text: str):
    from poptune import PopConfig

    skip, boundary, offset = text.split("/")
    return PopConfig(skip=int(skip), boundary=boundary, offset=int(offset))


def _outcomes(model: str, task: str, data_dir: Path, configs: list, items: int, chunk: int) -> dict:
    """Per configuration (the full model as ``full``), its outcomes on the first ``items`` items of ``task``."""
    from poptune import PopConfig
    from poptune.problem.evaluator import ConfigEvaluator
    from poptune.problem.problem import TuningProblem

    evaluator = ConfigEvaluator(TuningProblem(model=model, tasks=(task,), data_dir=str(data_dir)))
    out: dict[str, list[float]] = {"full": [], **{str(c): [] for c in configs}}
    for start in range(0, items, chunk):
        n = min(chunk, items - start)
        with evaluator.sharing(configs):  # the full model's prefill of each item scores every configuration
            out["full"] += evaluator.score_first(PopConfig(skip=0), {task: n}, skip=start).outcomes[task]
            for c in configs:
                out[str(c)] += evaluator.score_first(c, {task: n}, skip=start).outcomes[task]
        print(f"{task}: {start + n} items", flush=True)
    return out


def _counts_bound(d, upper: bool) -> float:
    """The one-look 95% bound of the former fit: each move taken for its share of a flip (Tango's counts)."""
    from poptune.evaluate.paired import bound_of_counts

    tasks = ((float(-d[d < 0].sum()), float(d[d > 0].sum()), int(d.size), float(d.mean())),)
    return 100 * bound_of_counts(tasks, 1.959964, upper)


def _row(task: str, label: str, full: list[float], other: list[float]) -> str:
    import numpy as np

    from poptune.evaluate.paired import PairedDrop, paired_drop
    from poptune.evaluate.racing import verdict_cost

    drop = paired_drop({task: full}, {task: other})
    d = np.asarray(full) - np.asarray(other)
    stored = drop.to_dict()
    stored.pop("squares")  # the drop as the former planning read it: its absolute moves
    before = verdict_cost(PairedDrop.from_dict(stored), 2.0, planned=128, start=32)
    after = verdict_cost(drop, 2.0, planned=128, start=32)
    rms = 100 * math.sqrt(np.square(d).mean())
    return (f"| {task} | {label} | {d.size} | {100 * np.abs(d).mean():.2f} | {rms:.2f} "
            f"| {drop.mean:+.2f} [{_counts_bound(d, False):+.2f}, {_counts_bound(d, True):+.2f}] | {drop} | "
            f"{before.items:,} | **{after.items:,}** | {before.items / after.items:.1f}x |")


def main(argv: list[str] | None = None) -> int:
    from poptune.measure.hardware import fingerprint
    from poptune.measure.provenance import typed_command, versions

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3")
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--tasks", default="longctx_squad:likelihood,passkey:likelihood")
    parser.add_argument("--configs", default=CONFIGS)
    parser.add_argument("--items", type=int, default=32)
    parser.add_argument("--chunk", type=int, default=4)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    configs = [_config(c) for c in args.configs.split(",")]
    began, rows = time.perf_counter(), []
    for task in args.tasks.split(","):
        out = _outcomes(args.model, task, args.data_dir, configs, args.items, args.chunk)
        rows += [_row(task, text, out["full"], out[str(c)]) for text, c in zip(args.configs.split(","), configs)]
    command = typed_command(["benchmarks/likelihood_verdict_cost.py", *(argv if argv is not None else sys.argv[1:])],
                            program=None)  # as a user types it, no path of this machine
    hardware, v = fingerprint("cpu"), versions()
    lines = [f"# How many items a 2-point likelihood verdict needs, before and after the empirical likelihood's "
             f"variance ({args.model})", "",
             f"- command: `{command.strip()}`",
             f"- hardware: {hardware.hardware_id}; versions: poptune {v.get('poptune')}, torch {v.get('torch')}, "
             f"transformers {v.get('transformers')}; wall time {(time.perf_counter() - began) / 60:.1f} min",
             f"- items: the first {args.items} of each task's fixed order (a study's search items), the full model "
             "and every configuration on each (one shared trunk per item)",
             "- outcome: the full answer's mean token probability after each side's prefill (`--judge likelihood`); "
             "mean |move| and rms move: the paired differences' mean absolute value and root mean square, in points",
             "- intervals: 95%, one look; before: the counts' fit (each move taken for its share of a flip), after: "
             "the empirical likelihood over the moves and the scale's ends (`poptune/evaluate/paired.py`)",
             "- items for a verdict: a 2-point verdict with 80% power if the true drop is 0, the standard "
             "certification's design (32 items per task first), as a study's plan and cost line print it "
             "(`verdict_cost`); before: sized on the absolute moves, after: on the squared ones", "",
             "| task | configuration | items | mean \\|move\\| pts | rms move pts | drop [95%], before | drop [95%], "
             "after | items for a verdict, before | after | fewer |",
             "| --- | --- | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: |", *rows, "",
             "Outcomes do not depend on the machine's load; the wall time is indicative. The error at the budget and "
             "the power of the empirical fit are the seeded simulation's "
             "(`python benchmarks/decision_errors.py --sections continuous`)."]
    name = "gemma-3-270m" if args.model == "gemma-3" else args.model
    out = args.out or ROOT / "leaderboards" / f"likelihood-verdict-cost-{name}-{hardware.hardware_id}.md"
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
