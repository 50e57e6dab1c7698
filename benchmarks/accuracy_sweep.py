"""Benchmark: task accuracy of POP configurations against the full model, written to ``leaderboards/``.

Usage::

    POPTUNE_DATA=../shared/data python benchmarks/accuracy_sweep.py --name full-sets \\
        --configs 6:last --tasks piqa,arc_easy,arc_challenge,hellaswag,winogrande,boolq
    POPTUNE_DATA=../shared/data python benchmarks/accuracy_sweep.py --name skip-sweep --limit 200 \\
        --configs 2:last,2:none,3:last,3:none,...,9:last,9:none

Each configuration is ``skip:boundary[:offset]``. The full model is measured once; every configuration is
scored by poptune's stage-aware lm-eval model (context = POP prefill, continuation at full depth) on the same
items (``--limit``: evenly spaced, the same every run). Accuracy = ``acc_norm`` for PIQA, ARC and HellaSwag,
``acc`` for WinoGrande and BoolQ (0-shot). Writes ``leaderboards/accuracy-<model>-<name>.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import sys
import time
from pathlib import Path

from poptune import PopConfig, load_model
from poptune.evaluate.suite import PRIMARY_METRIC, EvalSpec, measure_tasks
from poptune.evaluate.taskpack import data_dir
from poptune.measure.bench import versions
from poptune.measure.hardware import fingerprint

ROOT = Path(__file__).resolve().parents[1]


def _parse(text: str) -> list[PopConfig]:
    configs = []
    for part in text.split(","):
        fields = part.split(":")
        configs.append(PopConfig(int(fields[0]), fields[1] if len(fields) > 1 else "last",
                                 int(fields[2]) if len(fields) > 2 else 0))
    return configs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3")
    parser.add_argument("--configs", default="6:last")
    parser.add_argument("--tasks", default="piqa,arc_easy,arc_challenge,hellaswag,winogrande,boolq")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--name", default="sweep")
    parser.add_argument("--out", default=str(ROOT / "leaderboards"))
    args = parser.parse_args()

    directory = data_dir()
    if directory is None:
        sys.exit("set POPTUNE_DATA to the evaluation data directory")
    tasks = tuple(args.tasks.split(","))
    spec = EvalSpec(tasks=tasks, data_dir=directory, limit=args.limit, batch_size=args.batch_size, fidelity=None)
    model, tokenizer = load_model(args.model)
    rows = []
    for config in [PopConfig(0), *_parse(args.configs)]:
        start = time.perf_counter()
        scores, items, _ = measure_tasks(model, tokenizer, config, spec)
        seconds = time.perf_counter() - start
        rows.append({"config": config.to_dict(), "scores": scores, "items": items, "seconds": seconds})
        print(f"{config}: " + ", ".join(f"{t} {100 * scores[t][PRIMARY_METRIC[t]]:.2f}" for t in tasks)
              + f" ({seconds:.0f} s)", flush=True)

    full = {t: rows[0]["scores"][t][PRIMARY_METRIC[t]] for t in tasks}
    mean_tasks = [t for t in ("piqa", "arc_easy", "hellaswag", "winogrande", "boolq") if t in tasks] or list(tasks)
    command = "python benchmarks/accuracy_sweep.py " + shlex.join(sys.argv[1:])
    lines = [
        f"# Accuracy under POP: {args.model} ({args.name})",
        "",
        "0-shot, poptune's stage-aware lm-eval model; items per task: "
        + ", ".join(f"{t} {rows[0]['items'][t]}" for t in tasks)
        + (f" (evenly spaced subset, --limit {args.limit})" if args.limit else " (full sets)")
        + ". Metric: " + ", ".join(f"{t} {PRIMARY_METRIC[t]}" for t in tasks)
        + f". Mean and drop over {', '.join(mean_tasks)}; drop in points against the full model.",
        "",
        "| skip | boundary | offset | " + " | ".join(tasks) + " | mean | drop |",
        "|---:|---|---:|" + "---:|" * len(tasks) + "---:|---:|",
    ]
    for row in rows:
        acc = {t: row["scores"][t][PRIMARY_METRIC[t]] for t in tasks}
        mean = sum(acc[t] for t in mean_tasks) / len(mean_tasks)
        full_mean = sum(full[t] for t in mean_tasks) / len(mean_tasks)
        row["mean"], row["drop_points"] = mean, 100 * (full_mean - mean)
        c = row["config"]
        lines.append(f"| {c['skip']} | {c['boundary']} | {c['offset']} | "
                     + " | ".join(f"{100 * acc[t]:.2f}" for t in tasks)
                     + f" | {100 * mean:.2f} | {100 * (full_mean - mean):+.2f} |")
    hw = fingerprint("cpu")
    lines += ["", "## Provenance", "", f"- command: `{command.strip()}`",
              f"- date: {dt.datetime.now(dt.timezone.utc).isoformat(timespec='seconds')}",
              f"- hardware: {hw.name} ({hw.hardware_id})",
              f"- versions: {', '.join(f'{k} {v}' for k, v in versions().items())}",
              "- wall time per configuration (s): " + ", ".join(f"{r['seconds']:.0f}" for r in rows), ""]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"accuracy-{args.model}-{args.name}"
    (out / f"{stem}.md").write_text("\n".join(lines))
    (out / f"{stem}.json").write_text(json.dumps({"command": command.strip(), "rows": rows,
                                                  "hardware": hw.to_dict(), "versions": versions()}, indent=2) + "\n")
    print(f"wrote {out / stem}.md")


if __name__ == "__main__":
    main()
