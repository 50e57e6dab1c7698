"""Benchmark: task accuracy of POP configurations against the full model, written to ``leaderboards/``.

Usage::

    POPTUNE_DATA=../shared/data python benchmarks/accuracy_sweep.py --name full-sets \\
        --configs 6:last --tasks piqa,arc_easy,arc_challenge,hellaswag,winogrande,boolq
    POPTUNE_DATA=../shared/data python benchmarks/accuracy_sweep.py --name skip-sweep --limit 200 \\
        --configs 2:last,2:none,3:last,3:none,...,9:last,9:none

    POPTUNE_DATA=../shared/data python benchmarks/accuracy_sweep.py --name long-skip-sweep --limit 32 \
        --tasks longctx_squad,longctx_squad_bpb,longctx_qasper --configs 2:last,2:none,2:window-16,...

Each configuration is ``skip:boundary[:offset[:kv]]`` (``kv``: a K/V source, ``own``, ``calibrated`` -- whose maps
are fitted on WikiText-2 validation windows, or with ``--kv-fit workload`` on documents of the tasks that the sweep
never scores, as a study fits them, or read from the cache, before the configuration is scored -- or ``anchor``).
A configuration with another source than own is also paired with the same configuration with own K/V when the
sweep measured it before. The full model
is measured once; every configuration is
scored by poptune's stage-aware lm-eval model (context = POP prefill, continuation or generation at full
depth) on the same items (``--limit``: evenly spaced, the same every run), and its drop is paired item by item
with the full model's, with a 95% interval (:mod:`poptune.evaluate.paired`: the anytime-valid confidence
sequence for metrics in [0, 1], the bootstrap for bits per byte). The layers before the
skipped block are replayed from the full model's states (:mod:`poptune.engine.prefix`, checked once against the
plain prefill), and each configuration's greedy generation verifies the full model's answers as drafts
(:mod:`poptune.engine.speculate`: the same tokens, fewer decode steps; ``--no-reuse`` runs every configuration
plainly). Writes
``leaderboards/accuracy-<model>-<name>.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import json
import sys
import time
from pathlib import Path

from poptune import PopConfig, load_model
from poptune.engine.prefix import PrefixStates, verify
from poptune.evaluate.paired import paired_drop
from poptune.evaluate.suite import LOWER_IS_BETTER, PRIMARY_METRIC, EvalSpec, drop_of, measure_tasks
from poptune.evaluate.taskpack import data_dir
from poptune.files import typed_path
from poptune.kv import registry as kv_registry
from poptune.kvfit.fit import KVFitSpec
from poptune.kvfit.prepare import kv_details, prepare_kv
from poptune.measure.hardware import fingerprint
from poptune.measure.provenance import typed_command, versions
from poptune.models.registry import weights_fingerprint

ROOT = Path(__file__).resolve().parents[1]


def _parse(text: str) -> list[PopConfig]:
    configs = []
    for part in text.split(","):
        fields = part.split(":")
        configs.append(PopConfig(int(fields[0]), fields[1] if len(fields) > 1 else "last",
                                 int(fields[2]) if len(fields) > 2 else 0, kv=fields[3] if len(fields) > 3 else "own"))
    return configs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3")
    parser.add_argument("--configs", default="6:last")
    parser.add_argument("--tasks", default="piqa,arc_easy,arc_challenge,hellaswag,winogrande,boolq")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--name", default="sweep")
    parser.add_argument("--no-reuse", action="store_true", help="no prefix-state reuse")
    parser.add_argument("--max-state-gib", type=float, default=12.0, help="memory for replayed states (GiB)")
    parser.add_argument("--note", default="", help="a paragraph written under the table")
    parser.add_argument("--out", default=str(ROOT / "leaderboards"))
    parser.add_argument("--kv-fit", choices=("wikitext", "workload"), default="wikitext",
                        help="calibrated maps' text: WikiText-2 validation, or the tasks' never-scored documents")
    args = parser.parse_args()

    directory = data_dir()
    if directory is None:
        sys.exit("set POPTUNE_DATA to the evaluation data directory")
    tasks = tuple(args.tasks.split(","))
    spec = EvalSpec(tasks=tasks, data_dir=directory, limit=args.limit, batch_size=args.batch_size, fidelity=None)
    model, tokenizer = load_model(args.model)
    states = None
    if not args.no_reuse:
        from poptune.measure.timing_prompts import prompt_batch

        states = PrefixStates(max_bytes=int(args.max_state_gib * 2**30))
        verify(model, prompt_batch(tokenizer, 1024, 1)["input_ids"], PopConfig(6), PrefixStates())
    rows, runs, measured = [], [], []
    fit = _kv_fit_spec(args, tokenizer, directory, tasks)
    for config in [PopConfig(0), *_parse(args.configs)]:
        start = time.perf_counter()
        maps = prepare_kv(model, tokenizer, config, fingerprint=weights_fingerprint(args.model), spec=fit)
        with states.attached(model) if states is not None else contextlib.nullcontext():
            run = measure_tasks(model, tokenizer, config, spec)
        seconds = time.perf_counter() - start
        runs.append(run)
        measured.append((config, run))
        drops = {t: _task_drop(runs[0], run, t) for t in tasks}
        mean = drop_of(runs[0], run)
        rows.append({"config": config.to_dict(), "scores": run.scores, "items": run.counts, "seconds": seconds,
                     "drop": mean.to_dict(), "task_drops": {t: d.to_dict() for t, d in drops.items()},
                     "outcomes": run.outcomes, **_against_own(config, measured, run),
                     **_typed(kv_details(config, maps))})
        print(f"{config}: " + ", ".join(f"{t} {_fmt(t, run)} ({drops[t]})" for t in tasks)
              + f"; mean drop {mean} ({seconds:.0f} s)", flush=True)
        _write(args, tasks, rows, runs, states)  # after every configuration: a long sweep keeps what it has


def _kv_fit_spec(args, tokenizer, directory, tasks) -> KVFitSpec:
    """The maps' fit: WikiText-2 validation, or (``--kv-fit workload``) as a study fits them, on the last 32
    documents of each task's fixed order that this sweep does not score (its evenly spaced items excluded; a
    ``_bpb`` task shares its documents with its generation task, so only the latter gives prompts)."""
    if args.kv_fit == "wikitext":
        return KVFitSpec(data_dir=str(directory))
    from poptune.evaluate.suite import item_indices
    from poptune.evaluate.workload import Workload, calibration_prompts, task_prompts
    from poptune.kvfit.fit import PROMPT_TOKENS

    named = [t for t in tasks if not t.endswith("_bpb")]
    texts = task_prompts(named, directory)
    workload = Workload({t: item_indices(len(texts[t]), args.limit) for t in named}, {t: [] for t in named})
    prompts, source = calibration_prompts(tokenizer, workload, data_dir=directory, count=32, max_tokens=PROMPT_TOKENS)
    print(f"K/V maps fitted on: {source}", flush=True)
    return KVFitSpec(data_dir=str(directory), prompts=tuple(prompts), prompts_source=source)


def _against_own(config, measured, run) -> dict:
    """A configuration's mean drop against the same configuration with own K/V measured earlier in the sweep
    (``measured``: configuration and run pairs), paired on the same items (positive: the other source worse);
    nothing where there is none (or it is own K/V)."""
    own = dataclasses.replace(config, kv=kv_registry.DEFAULT)
    for other, other_run in measured:
        if config != own and other == own:
            return {"against_own": drop_of(other_run, run).to_dict()}
    return {}


def _write(args, tasks, rows, runs, states) -> None:
    """The sweep's Markdown table and JSON rows so far."""
    command = typed_command(["benchmarks/accuracy_sweep.py", *sys.argv[1:]], program=None)
    higher = [t for t in tasks if PRIMARY_METRIC[t] not in LOWER_IS_BETTER]
    lines = [
        f"# Accuracy under POP: {args.model} ({args.name})",
        "",
        "poptune's stage-aware lm-eval model; items per task: "
        + ", ".join(f"{t} {runs[0].counts[t]}" for t in tasks)
        + (f" (evenly spaced subset, --limit {args.limit})" if args.limit else " (full sets)")
        + ". Metric: " + ", ".join(f"{t} {PRIMARY_METRIC[t]}" for t in tasks)
        + ". Each cell: the score (points; bits per byte as is) and, below the full model, the paired drop "
        "against it with its 95% interval (positive = worse; anytime-valid confidence sequence for metrics in "
        "[0, 1], bootstrap for bits per byte). "
        f"Mean drop over {', '.join(higher)}.",
        "",
        "| skip | boundary | offset | kv | " + " | ".join(tasks) + " | mean drop [95% CI] |",
        "|---:|---|---:|---|" + "---|" * len(tasks) + "---|",
    ]
    for row, run in zip(rows, runs):
        c = row["config"]
        cells = [_fmt(t, run) + ("" if c["skip"] == 0 else f" ({_ci(row['task_drops'][t])})") for t in tasks]
        mean = "" if c["skip"] == 0 else _ci(row["drop"])
        lines.append(f"| {c['skip']} | {c['boundary']} | {c['offset']} | {c.get('kv', 'own')} | "
                     + " | ".join(cells) + f" | {mean} |")
    paired = [(row["config"], row["against_own"]) for row in rows if "against_own" in row]
    if paired:
        lines += ["", "Against own K/V, paired on the same items (mean drop of the configuration's K/V source below "
                  "own K/V, points, 95% interval as above; positive: that source worse):", ""]
        lines += [f"- skip {c['skip']} {c['boundary']} offset {c['offset']} {c['kv']}: {_ci(d)}" for c, d in paired]
    hw = fingerprint("cpu")
    reuse = "off" if states is None else (f"on ({states.replayed} prefills replayed, {states.drafted} generations "
                                          f"verified in rounds, {states.accepted} proposed tokens accepted)")
    if args.note:
        lines += ["", args.note]
    lines += ["", "## Provenance", "", f"- command: `{command.strip()}`",
              f"- date: {dt.datetime.now(dt.timezone.utc).isoformat(timespec='seconds')}",
              f"- hardware: {hw.name} ({hw.hardware_id})",
              f"- versions: {', '.join(f'{k} {v}' for k, v in versions().items())}",
              f"- prefix-state reuse: {reuse}",
              "- wall time per configuration (s): " + ", ".join(f"{r['seconds']:.0f}" for r in rows), ""]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"accuracy-{args.model}-{args.name}"
    (out / f"{stem}.md").write_text("\n".join(lines))
    (out / f"{stem}.json").write_text(json.dumps({"command": command.strip(), "rows": rows,
                                                  "hardware": hw.to_dict(), "versions": versions()}, indent=2) + "\n")
    print(f"wrote {out / stem}.md")


def _typed(details: dict) -> dict:
    """A measurement's K/V details with its maps' file as a user types it (``~/.cache/...``): no machine path."""
    return {k: dict(v, file=typed_path(v["file"])) if isinstance(v, dict) and "file" in v else v
            for k, v in details.items()}


def _task_drop(full, run, task):
    lower = PRIMARY_METRIC[task] in LOWER_IS_BETTER
    return paired_drop({task: full.outcomes[task]}, {task: run.outcomes[task]},
                       lower_is_better=[task] if lower else [], scale=1.0 if lower else 100.0)


def _fmt(task, run):
    value = run.primary()[task]
    return f"{value:.3f}" if PRIMARY_METRIC[task] in LOWER_IS_BETTER else f"{100 * value:.2f}"


def _ci(drop):
    return f"{drop['mean']:+.2f} [{drop['lo']:+.2f}, {drop['hi']:+.2f}]"


if __name__ == "__main__":
    main()
