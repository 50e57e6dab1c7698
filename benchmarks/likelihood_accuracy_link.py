"""Benchmark: does a likelihood drop say anything about the accuracy drop? Both, paired, on the same items.

``--judge likelihood`` scores an item by the mean probability of the full model's answer tokens under a
configuration's prefill (teacher-forced); the tasks' own metric grades the configuration's free answer. This
scores the full model and every configuration of ``--configs`` (depths, boundaries, K/V sources) on the same
fresh items of each task (positions ``--start`` on: no study's search item), one shared trunk per item, and
reports per configuration and task: the likelihood drop and the accuracy drop (the tasks' own metric), each with
its paired 95% interval (one look, :func:`poptune.evaluate.paired.paired_drop`), the share of answers that
changed, and two statistics where gains cannot cancel losses: the mean of each item's likelihood loss (its
positive part) and the share of items whose grade fell. Across configurations: the correlation of the two drops,
and how often a configuration whose likelihood interval lies under the budget (what a one-look likelihood verdict
would certify) loses more than the budget in accuracy, point estimate and bound alike.

Usage::

    python benchmarks/likelihood_accuracy_link.py [--data-dir ../shared/data] [--tasks passkey:likelihood,...]
        [--items 48] [--configs 6/last/0,...]

Writes ``leaderboards/<name>-<model>-<hardware>.md`` (``--name``, default ``likelihood-accuracy-link``; or
``--out``) and a JSON record of every item's figures in ``leaderboards/raw/``, which a later run with the same
configurations adds its tasks to (never overwritten); ``--from-record`` writes the board again from it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: 22 configurations of Gemma-3-270M (18 layers): depths 2 to 16, four boundaries, offsets, two K/V sources.
CONFIGS = ("2/last/0,4/last/0,6/last/0,8/last/0,10/last/0,12/last/0,14/last/0,16/last/0,"
           "6/window-64/0,8/window-64/0,10/window-64/0,12/window-64/0,14/window-64/0,"
           "9/window-16/0,4/none/0,8/none/0,8/last/2,10/last/4,"
           "4/window-64/0/anchor,6/window-64/0/anchor,8/last/0/anchor,12/window-64/0/anchor")

BUDGET = 2.0

#: The figures of an item the record keeps (:mod:`poptune.evaluate.answers`).
KEPT = ("correct", "full_correct", "unchanged", "tokens")


def _config(text: str):
    from poptune import PopConfig

    skip, boundary, offset, *kv = text.split("/")
    return PopConfig(skip=int(skip), boundary=boundary, offset=int(offset), **({"kv": kv[0]} if kv else {}))


def _figures(model: str, task: str, data_dir: Path | None, configs: list, start: int, items: int,
             chunk: int) -> dict[str, list[dict]]:
    """Per configuration (the full model as ``full``), every item's figures on ``items`` items of ``task`` from
    position ``start`` of its fixed order: the likelihood outcome and, graded by the task's metric, both answers."""
    from poptune import PopConfig
    from poptune.evaluate.suite import LIKELIHOOD_ITEMS
    from poptune.problem.evaluator import ConfigEvaluator
    from poptune.problem.problem import TuningProblem

    evaluator = ConfigEvaluator(TuningProblem(model=model, tasks=(task,), data_dir=str(data_dir) if data_dir else None,
                                              certify_limit=start + items))  # a workload that reaches the items
    out: dict[str, list[dict]] = {"full": [], **{str(c): [] for c in configs}}
    for at in range(start, start + items, chunk):
        n = min(chunk, start + items - at)
        with evaluator.sharing(configs):  # the full model's prefill of each item scores every configuration
            for name, config in (("full", PopConfig(skip=0)), *((str(c), c) for c in configs)):
                run = evaluator.score_first(config, {task: n}, skip=at)
                rows = run.details[LIKELIHOOD_ITEMS][task]
                out[name] += [{"item": i, "outcome": o, **{k: rows[i][k] for k in KEPT if k in rows[i]}}
                              for i, o in zip(run.items[task], run.outcomes[task])]
        print(f"{task}: {at + n - start} items", flush=True)
    return out


def _drops(full: list[dict], mine: list[dict]) -> dict:
    """One configuration's figures on one task against the full model's, item by item."""
    import numpy as np

    from poptune.evaluate.changed import changed_interval
    from poptune.evaluate.paired import paired_drop

    like = paired_drop({"t": [f["outcome"] for f in full]}, {"t": [f["outcome"] for f in mine]})
    acc = paired_drop({"t": [f["full_correct"] for f in mine]}, {"t": [f["correct"] for f in mine]})
    moves = np.array([a["outcome"] - b["outcome"] for a, b in zip(full, mine)])
    changed = int(sum(1 for f in mine if not f.get("unchanged", 1)))
    falls = np.array([f["full_correct"] - f["correct"] for f in mine])
    return {"items": len(mine), "likelihood": like.to_dict(), "accuracy": acc.to_dict(),
            "like_mean": like.mean, "like_lo": like.lo, "like_hi": like.hi,
            "acc_mean": acc.mean, "acc_lo": acc.lo, "acc_hi": acc.hi,
            "loss_part": 100 * float(np.clip(moves, 0, None).mean()),
            "fell": int((falls > 0).sum()), "rose": int((falls < 0).sum()),
            "changed": changed, "changed_hi": 100 * changed_interval(changed, len(mine), one_sided=True).hi}


def _pearson(x: list[float], y: list[float]) -> float:
    import numpy as np

    return float(np.corrcoef(x, y)[0, 1]) if len(x) > 2 and np.std(x) > 0 and np.std(y) > 0 else math.nan


def _spearman(x: list[float], y: list[float]) -> float:
    import numpy as np

    rank = lambda v: np.argsort(np.argsort(v)).astype(float)  # noqa: E731  (no ties expected among means)
    return _pearson(list(rank(np.asarray(x))), list(rank(np.asarray(y))))


def _table(rows: list[tuple[str, str, dict]]) -> list[str]:
    lines = ["| task | configuration | items | likelihood drop [95%] | accuracy drop [95%] | likelihood loss part "
             "| grades fell / rose | answers changed (exact 95% upper bound, %) | one-look likelihood verdict |",
             "| --- | --- | ---: | --- | --- | ---: | ---: | ---: | --- |"]
    for task, label, d in rows:
        verdict = "within" if d["like_hi"] <= BUDGET else "beyond" if d["like_lo"] > BUDGET else "undecided"
        lines.append(f"| {task} | {label} | {d['items']} | {d['like_mean']:+.2f} [{d['like_lo']:+.2f}, "
                     f"{d['like_hi']:+.2f}] | {d['acc_mean']:+.2f} [{d['acc_lo']:+.2f}, {d['acc_hi']:+.2f}] | "
                     f"{d['loss_part']:.2f} | {d['fell']} / {d['rose']} | {d['changed']} ({d['changed_hi']:.1f}) "
                     f"| {verdict} |")
    return lines


def _summary(rows: list[tuple[str, str, dict]]) -> list[str]:
    """What the table says across configurations, per task and pooled."""
    lines = []
    for task in [*dict.fromkeys(t for t, _, _ in rows), None]:
        mine = [d for t, _, d in rows if task is None or t == task]
        like, acc = [d["like_mean"] for d in mine], [d["acc_mean"] for d in mine]
        part = [d["loss_part"] for d in mine]
        within = [d for d in mine if d["like_hi"] <= BUDGET]
        worse = [d for d in within if d["acc_mean"] > BUDGET]
        beyond = [d for d in within if d["acc_lo"] > BUDGET]
        small = [d for d in mine if d["like_mean"] <= BUDGET]
        lines.append(
            f"- **{task or 'all tasks together'}** ({len(mine)} configuration-task pairs): likelihood drop against "
            f"accuracy drop, Pearson r = {_pearson(like, acc):.2f}, Spearman rho = {_spearman(like, acc):.2f}; "
            f"the likelihood loss part against the accuracy drop: Pearson r = {_pearson(part, acc):.2f}. "
            f"{len(within)} would be certified within {BUDGET:g} likelihood points by a one-look interval; of "
            f"them {len(worse)} lose more than {BUDGET:g} accuracy points (point estimate), {len(beyond)} "
            f"beyond doubt (the accuracy interval above {BUDGET:g}). {len(small)} have a likelihood drop of at most "
            f"{BUDGET:g} points (point estimate); of them {sum(d['acc_mean'] > BUDGET for d in small)} lose more than "
            f"{BUDGET:g} accuracy points (point estimate), {sum(d['fell'] > 0 for d in small)} have grades that fell.")
    return lines


def main(argv: list[str] | None = None) -> int:
    from poptune.measure.hardware import fingerprint
    from poptune.measure.provenance import typed_command, versions

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3")
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--tasks", default="passkey:likelihood,kv_recall:likelihood")
    parser.add_argument("--configs", default=CONFIGS)
    parser.add_argument("--start", type=int, default=64, help="first item (past a study's search items)")
    parser.add_argument("--items", type=int, default=48)
    parser.add_argument("--chunk", type=int, default=8)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--name", default="likelihood-accuracy-link", help="the board's and record's name")
    parser.add_argument("--from-record", action="store_true",
                        help="score nothing: write the board again from the record in leaderboards/raw/")
    args = parser.parse_args(argv)
    texts = args.configs.split(",")
    configs = [_config(c) for c in texts]
    command = typed_command(["benchmarks/likelihood_accuracy_link.py", *(argv if argv is not None else sys.argv[1:])],
                            program=None).strip()  # as a user types it, no path of this machine
    hardware, v = fingerprint("cpu"), versions()
    name = "gemma-3-270m" if args.model == "gemma-3" else args.model
    stem = f"{args.name}-{name}-{hardware.hardware_id}"
    record = ROOT / "leaderboards" / "raw" / f"{stem}.json"
    # the record is appended to, never overwritten: a later run adds its tasks beside the earlier runs' (same configs)
    read = (args.out is None or args.from_record) and record.exists()
    kept = json.loads(record.read_text(encoding="utf-8")) if read else {}
    if kept and kept.get("configs") != texts:
        raise SystemExit(f"{record.name} holds other configurations: pass --out for a separate board")
    runs, raw = kept.get("runs", []), kept.get("tasks", {})
    began = time.perf_counter()
    for task in [] if args.from_record else args.tasks.split(","):
        raw[task] = _figures(args.model, task, args.data_dir, configs, args.start, args.items, args.chunk)
    if not args.from_record:
        runs.append({"command": command, "tasks": args.tasks.split(","),
                     "minutes": (time.perf_counter() - began) / 60})
    rows = [(task, text, _drops(figures["full"], figures[str(c)]))
            for task, figures in raw.items() for text, c in zip(texts, configs)]
    if args.out is None and not args.from_record:
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps({"configs": texts, "runs": runs, "tasks": raw}, default=float) + "\n",
                          encoding="utf-8")
    lines = [f"# Likelihood drops against accuracy drops, paired on the same items ({args.model})", "",
             *(f"- command: `{run['command']}` ({', '.join(run['tasks'])}; wall time {run['minutes']:.0f} min)"
               for run in runs),
             f"- hardware: {hardware.hardware_id}; versions: poptune {v.get('poptune')}, torch {v.get('torch')}, "
             f"transformers {v.get('transformers')}",
             f"- items: from position {args.start} of each task's fixed order (no study's "
             "search item), the full model and every configuration on each (one shared trunk per item)",
             "- likelihood drop: the paired drop (points) of the full answer's mean token probability under each "
             "side's prefill (`--judge likelihood`'s outcome); accuracy drop: the paired drop of the task's own "
             "metric of each side's greedy answer; both 95%, one look (`poptune/evaluate/paired.py`)",
             "- likelihood loss part: the mean over items of max(0, full - configuration) in likelihood points (gains "
             "cannot cancel losses); grades fell / rose: items whose grade went down / up; answers changed: not "
             "token for token the full model's",
             f"- one-look likelihood verdict: within when the likelihood interval's upper end is at most {BUDGET:g} "
             "points (what a certification at one look would print), beyond when its lower end is above", "",
             "## Across configurations", "", *_summary(rows), "", "## Every configuration", "", *_table(rows), "",
             "Outcomes do not depend on the machine's load; the wall time is indicative."]
    out = args.out or ROOT / "leaderboards" / f"{stem}.md"
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
