"""Benchmark: a study's search with its trials asked one at a time against in batches (``poptune study --batch``).

The same study is run once per batch size, each from an empty storage, in one process on one loaded model: the
grid sampler (its seeded order, so every run measures the same configurations), certification off, the A/A checks
and the confirmation pass off (they do not depend on the batch). A batch's trials race their accuracy together
(:mod:`poptune.tune.batch`); their latency pairs stay per configuration. Reported per run: the search's seconds,
and the accuracy part's (the races, the full model's scoring of their items included), per measured POP trial.
Null check: every run measures every configuration with the same accuracy, drop interval and items (the run stops
otherwise).

Usage::

    python benchmarks/bench_batch_trials.py [--trials 10] [--batches 1,8,1,8] [--data-dir ../shared/data --long]
    python benchmarks/bench_batch_trials.py --model gemma-3-1b --weights random --device cuda   # a GPU's figure

Writes ``leaderboards/batch-trials-<model>-<hardware>.md`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from poptune import load_model
from poptune.cli._args import config_list
from poptune.device import dtype_of
from poptune.measure.hardware import fingerprint
from poptune.measure.provenance import typed_command, versions
from poptune.problem.evaluator import ConfigEvaluator
from poptune.problem.problem import TuningProblem
from poptune.store.trials import completed
from poptune.tune.study import StudySpec, run_study

ROOT = Path(__file__).resolve().parents[1]


def _timed(evaluator: ConfigEvaluator, name: str, spent: list[float]) -> None:
    """Add the seconds of every call of ``evaluator.name`` to ``spent[0]``."""
    inner = getattr(evaluator, name)

    def wrapped(*args, **kwargs):
        began = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - began

    setattr(evaluator, name, wrapped)


def _run(problem: TuningProblem, loaded, trials: int, batch: int, folder: Path, enqueue: tuple = ()) -> dict:
    """One study from an empty storage: its seconds, its races' seconds and what it measured."""
    evaluator = ConfigEvaluator(problem, model=loaded)
    accuracy, latency = [0.0], [0.0]
    for name in ("race_accuracy", "race_together"):
        _timed(evaluator, name, accuracy)
    _timed(evaluator, "_timed", latency)
    spec = StudySpec(problem=problem, trials=trials, sampler="grid", storage=f"sqlite:///{folder}/study.db",
                     confirm=False, batch=batch, enqueue=enqueue)
    began = time.perf_counter()
    study = run_study(spec, evaluator=evaluator)
    seconds = time.perf_counter() - began
    measured = {str(t.user_attrs["config"]):
                (t.values[1], t.user_attrs["drop"], t.user_attrs["items"]) for t in completed(study)}
    pop = sum(1 for t in completed(study) if t.user_attrs["config"].get("skip", 0) > 0)
    return {"batch": batch, "seconds": seconds, "accuracy": accuracy[0], "latency": latency[0], "pop": pop,
            "measured": measured}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="gemma-3")
    parser.add_argument("--trials", type=int, default=10, help="the study's measured configurations (the full "
                        "model and the paper's rule first, alone)")
    parser.add_argument("--batches", default="1,4,8", help="batch sizes, run in this order")
    parser.add_argument("--data-dir", help="the task pack's folder (with --long)")
    parser.add_argument("--long", action="store_true", help="the long-prompt pack (longctx_squad, longctx_qasper)")
    parser.add_argument("--enqueue", metavar="SKIP/BOUNDARY/OFFSET[/KV],...",
                        help="configurations measured first, after the full model and the paper's rule (in every "
                        "run: the same ones), e.g. a search's moderate ones, whose races go to the cap")
    parser.add_argument("--weights", default="pretrained", choices=("pretrained", "random"),
                        help="random: the architecture's cost without its weights (a GPU without the model's files; "
                        "every outcome is then the full model's, so every race runs to its cap)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",")]
    extra = {"tasks": ("longctx_squad", "longctx_qasper"), "data_dir": args.data_dir} if args.long else {}
    problem = TuningProblem(model=args.model, device=args.device, weights=args.weights, certify_limit=0, **extra)
    loaded = load_model(args.model, device=args.device, dtype=problem.dtype_named().dtype, weights=args.weights)
    hardware = fingerprint(loaded[0].device)
    runs = []
    with tempfile.TemporaryDirectory() as folder:
        for batch in batches:
            print(f"batch {batch}", file=sys.stderr, flush=True)
            run = Path(folder) / f"run-{len(runs)}"  # an empty storage each
            run.mkdir()
            runs.append(_run(problem, loaded, args.trials, batch, run, config_list(args.enqueue, "--enqueue")))
    first = runs[0]
    for run in runs[1:]:
        if run["measured"] != first["measured"]:
            print(f"batch {run['batch']} measured otherwise than batch {first['batch']}", file=sys.stderr)
            return 1
    one = [r for r in runs if r["batch"] == 1] or [first]  # the ratios' reference: the runs of one at a time
    base = {k: sum(r[k] for r in one) / len(one) for k in ("seconds", "accuracy")}
    rows = [f"| {r['batch']} | {r['pop']} | {r['seconds']:.0f} | {base['seconds'] / r['seconds']:.2f}x | "
            f"{r['latency']:.0f} | {r['accuracy']:.0f} | {r['accuracy'] / r['pop']:.1f} | "
            f"{base['accuracy'] / r['accuracy']:.2f}x |" for r in runs]
    command = typed_command(["benchmarks/bench_batch_trials.py", *(argv if argv is not None else sys.argv[1:])],
                            program=None)  # as a user types it, no path of this machine
    v = versions()
    text = "\n".join([
        f"# A study's search, trials one at a time against in batches ({args.model}"
        f"{', random weights' if args.weights == 'random' else ''}, "
        f"{'the long-prompt pack' if args.long else 'the embedded tasks'})", "",
        f"- command: `{command.strip()}`",
        f"- hardware: {hardware.hardware_id}, {dtype_of(loaded[0])}; versions: poptune {v.get('poptune')}, "
        f"torch {v.get('torch')}, transformers {v.get('transformers')}",
        f"- the study: {args.trials} measured configurations, "
        + (f"{args.enqueue} enqueued after the full model and the paper's rule, then " if args.enqueue else "")
        + "the grid sampler (the same configurations in every run), certification, A/A checks and confirmation "
        "off; each run from an empty storage, in this order, in one "
        "process on one loaded model; the full model and the paper's rule are measured alone in every run",
        "- latency: the timing pairs' seconds (per configuration, as one at a time); accuracy: the races' seconds "
        "(the full model's scoring of their items included); batch 1 / this: against the mean of the batch-1 runs",
        "- null check: every run measured every configuration with the same accuracy, drop interval and items",
        "",
        "| batch | POP trials | search s | search: batch 1 / this | latency s | accuracy s | accuracy s / POP trial | "
        "accuracy: batch 1 / this |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *rows, "",
        "Ratios are measured in one process, runs back to back; absolute times are indicative"
        + (" (a shared 2-core CPU)." if hardware.kind == "cpu" else "."), ""])
    name = "gemma-3-270m" if args.model == "gemma-3" else args.model
    name += ("-random" if args.weights == "random" else "") + ("-long" if args.long else "") + \
        ("-enqueued" if args.enqueue else "")
    out = Path(args.out) if args.out else ROOT / "leaderboards" / f"batch-trials-{name}-{hardware.hardware_id}.md"
    out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
