"""Benchmark: what an item costs when the full model and POP configurations are scored on it.

Three ways to score the same fresh items (a certification's: after the search's first 32 per task), and their
floor, each item's outcome computed by the same scoring code a study uses
(:func:`poptune.evaluate.suite.measure_tasks`):

- **before**: the per-configuration engine: the full model's pass, then each configuration's own whole pass;
- **after**: the shared trunk (:mod:`poptune.engine.trunk`): the full model's pass also scores every configuration
  from its layer inputs, one batch at a time, and each configuration's pass is served what it left;
- **cached** (one candidate): the full model's answers remembered (:mod:`poptune.store.answers`), so only the
  candidate's own pass runs;
- **full model alone**: the full model's own pass and nothing else: the floor of an item no run has scored before,
  which no sharing removes (its ratio is the most any way can give on fresh items).

Scenarios: the full model plus one candidate (``--candidate``, default 5/window-64/0), and the full model plus 8
configurations. Items are taken in chunks, and in every chunk the ways run back to back, their order alternating
(this shared machine drifts); the ratio is the summed seconds of before over after, with the median per-chunk
ratio and its range. Null check: every way gives every configuration the same outcome on every item.

Usage::

    python benchmarks/bench_item_cost.py [--data-dir ../shared/data] [--chunks 3] [--per-chunk 8]
    python benchmarks/bench_item_cost.py --model llama-3.1 --weights random --device cuda   # a GPU's figure

Random weights give meaningless answers at the real architecture's cost: the ways still have to agree.
``--parts`` runs the many-configuration scenario's after way once more per chunk, its parts timed (the full model's
prefill, the configurations' own, the stacked decode's forwards and token picks, the caches' stacking, the trunk's
log-likelihood forwards; on a GPU each part synchronized before it is read) and the stacks' row-layers counted,
those taken from repeated rows among them: where an item's time goes.

Writes ``leaderboards/item-cost-<model>-<hardware>.md`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

from poptune import PopConfig, load_model
from poptune.device import dtype_of
from poptune.engine.trunk import SharedTrunk
from poptune.evaluate.suite import EvalSpec, measure_tasks
from poptune.evaluate.workload import build_workload
from poptune.measure.hardware import fingerprint
from poptune.measure.provenance import typed_command, versions

ROOT = Path(__file__).resolve().parents[1]

EIGHT = ("4/window-64/0", "5/window-64/0", "6/last/0", "6/window-64/0", "7/window-64/0", "9/window-64/0",
         "5/window-64/1", "6/window-64/0/anchor")


def _config(text: str) -> PopConfig:
    parts = text.split("/")
    return PopConfig(skip=int(parts[0]), boundary=parts[1], offset=int(parts[2]),
                     kv=parts[3] if len(parts) > 3 else "own")


def _ways(model, tok, spec, configs, full_cached: bool) -> dict:
    """Seconds and outcomes of each way on ``spec``'s items."""
    full = PopConfig(skip=0)

    def before():
        return {c: measure_tasks(model, tok, c, spec).outcomes for c in [full, *configs]}

    def after():
        trunk = SharedTrunk(configs)
        with trunk.attached(model, keep=True):
            result = {c: measure_tasks(model, tok, c, spec).outcomes for c in [full, *configs]}
        assert trunk.alone == 0 and trunk.served == trunk.led * len(configs), (trunk.led, trunk.served, trunk.alone)
        return result

    def cached():
        return {c: measure_tasks(model, tok, c, spec).outcomes for c in configs}

    def full_alone():  # the floor on fresh items: no sharing removes the full model's own pass
        return {full: measure_tasks(model, tok, full, spec).outcomes}

    return {"before": before, "after": after, **({"cached": cached} if full_cached else {}),
            "full model alone": full_alone}


def _parts(model, tok, spec, configs) -> dict[str, float]:
    """The after way once more, its seconds by part: the stacked path's functions (``poptune.engine.joint``) timed
    by wrapping them, and its stacks' row-layers, those computed once for rows that repeat the full model's
    (``poptune.engine.repeats``) among them."""
    from collections import defaultdict
    from unittest import mock

    import torch

    from poptune.engine import joint
    from poptune.engine.pop import get_pop_config

    seconds: dict[str, float] = defaultdict(float)
    made = []
    sync = torch.cuda.synchronize if model.device.type == "cuda" else (lambda: None)

    def full(args):
        config = get_pop_config(args[0])
        return config is None or config.skip == 0

    parts = {"plain_generate": lambda a: "prefills: the full model's" if full(a) else "prefills: the configurations'",
             "decode_forward": lambda a: "decode steps: the stack" if full(a) else "decode steps: beside the stack",
             "_picks": lambda a: "decode steps: tokens picked (LM head)", "_stacked": lambda a: "caches stacked"}

    def timed(name, label, owner=joint):
        real = getattr(owner, name)

        def wrapper(*args, **kwargs):
            sync()
            start = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                sync()
                seconds[label(args)] += time.perf_counter() - start
        return wrapper

    real_of = joint.Repeats.of

    def of(*args):
        made.append(real_of(*args))
        return made[-1]

    with contextlib.ExitStack() as stack:
        for name, label in parts.items():
            stack.enter_context(mock.patch.object(joint, name, timed(name, label)))
        stack.enter_context(mock.patch.object(joint.Repeats, "of", staticmethod(of)))
        stack.enter_context(mock.patch.object(joint, "generate_together", timed("generate_together", lambda a: "g")))
        stack.enter_context(mock.patch.object(SharedTrunk, "run", timed("run", lambda a: "t", SharedTrunk)))
        start = time.perf_counter()
        _ways(model, tok, spec, configs, False)["after"]()
        wall = time.perf_counter() - start
    scored = seconds.pop("t") - seconds.pop("g")  # the trunk's batches that are not greedy generations
    inside = sum(seconds.values())
    seconds["log-likelihood forwards (multiple choice: the full model's, each configuration's)"] = scored
    seconds["everything else (lm-eval, scoring, bookkeeping)"] = wall - inside - scored
    seconds["row-layers not computed"] = sum(r.skipped for r in made if r)
    seconds["row-layers"] = sum(r.total for r in made if r)
    return seconds


def _where(pack: str, label: str, items: int, parts: dict[str, float]) -> str:
    """Where the after way's time went (``--parts``), a paragraph and a table."""
    skipped = int(parts.pop("row-layers not computed"))
    computed = int(parts.pop("row-layers")) - skipped
    total = sum(parts.values())
    lines = [f"Where the after way's time goes ({pack}, {label}; the way run once more per chunk, its parts timed by "
             f"wrapping `poptune.engine.joint`'s functions: {total / items:.3f} s/item): the stacks computed "
             f"{computed:,} row-layers and took {skipped:,} from the full model's rows they repeat "
             f"({skipped / max(computed + skipped, 1):.0%}; `poptune/engine/repeats.py`).", "",
             "| part | s/item | share |", "| --- | ---: | ---: |"]
    lines += [f"| {name} | {seconds / items:.3f} | {seconds / total:.0%} |" for name, seconds in sorted(parts.items())]
    return "\n".join([*lines, ""])


def _chunk(model, tok, spec, configs, cached, flip):
    ways = _ways(model, tok, spec, configs, cached)
    names = list(ways)[::-1] if flip else list(ways)
    times, outs = {}, {}
    for name in names:
        start = time.perf_counter()
        outs[name] = ways[name]()
        times[name] = time.perf_counter() - start
    for name, result in outs.items():  # null check: every way, every configuration, every item the same
        for config, outcomes in result.items():
            if outcomes != outs["before"][config]:
                raise SystemExit(f"{name} differs from before for {config}: {outcomes} != {outs['before'][config]}")
    return times


def _spec(tasks, data_dir, chosen):
    """The scoring of ``chosen`` items (per task), batch 8, as every way runs it."""
    return EvalSpec(tasks=tasks, data_dir=data_dir, batch_size=8, fidelity=None, synthetic_lengths=(512,),
                    seed=0).with_samples(chosen)


def _scenario(model, tok, args, tasks, configs, cached, per_chunk, chunks, data_dir, warmup=False, parts=None):
    limit = getattr(model.config, "max_position_embeddings", None)
    work = build_workload(tok, tasks, data_dir=data_dir, cap=32 + per_chunk * chunks, synthetic_lengths=(512,),
                          max_positions=limit, seed=0)
    totals: dict[str, float] = {}
    ratios: dict[str, list[float]] = {}
    items = 0
    if warmup:  # a GPU's first passes pay kernel selection and the allocator's growth: one chunk, untimed
        first = {t: work.order[t][32: 32 + per_chunk] for t in tasks}
        _chunk(model, tok, _spec(tasks, data_dir, first), configs, cached, flip=False)
    for k in range(chunks):
        chosen = {t: work.order[t][32 + k * per_chunk: 32 + (k + 1) * per_chunk] for t in tasks}
        spec = _spec(tasks, data_dir, chosen)
        times = _chunk(model, tok, spec, configs, cached, flip=k % 2 == 1)
        if parts is not None:
            for name, value in _parts(model, tok, spec, configs).items():
                parts[name] = parts.get(name, 0.0) + value
        n = sum(map(len, chosen.values()))
        items += n
        for name, seconds in times.items():
            totals[name] = totals.get(name, 0.0) + seconds
            if name != "before":
                ratios.setdefault(name, []).append(times["before"] / seconds)
        print(f"  chunk {k + 1}/{chunks}: " + ", ".join(f"{w} {s / n:.3f} s/item" for w, s in times.items()),
              file=sys.stderr, flush=True)
    return items, totals, ratios


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="gemma-3")
    parser.add_argument("--data-dir", help="also the long-prompt pack (longctx_squad, longctx_qasper)")
    parser.add_argument("--candidate", default="5/window-64/0")
    parser.add_argument("--chunks", type=int, default=3)
    parser.add_argument("--per-chunk", type=int, default=8, help="items per task in a chunk")
    parser.add_argument("--long-per-chunk", type=int, default=4)
    parser.add_argument("--long-chunks", type=int, default=1)
    parser.add_argument("--configs", default=",".join(EIGHT), help="the many-configuration scenario's (comma list)")
    parser.add_argument("--weights", default="pretrained", choices=("pretrained", "random"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", help="default: the device's native precision (poptune.load_model)")
    parser.add_argument("--parts", action="store_true",
                        help="also run the many-configuration after way once more per chunk, timed by part")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    model, tok = load_model(args.model, device=args.device, dtype=args.dtype, weights=args.weights)
    hardware = fingerprint(model.device)
    packs = [("embedded", ("passkey", "kv_recall"), None, args.per_chunk, args.chunks)]
    if args.data_dir:
        packs.append(("long prompts", ("longctx_squad", "longctx_qasper"), Path(args.data_dir), args.long_per_chunk,
                      args.long_chunks))
    many = args.configs.split(",")
    rows, where = [], []
    began = time.perf_counter()
    for pack, tasks, data_dir, per_chunk, chunks in packs:
        for label, configs, cached in ((f"full + 1 candidate ({args.candidate})", [_config(args.candidate)], True),
                                       (f"full + {len(many)} configurations", [_config(c) for c in many], False)):
            print(f"{pack}: {label}", file=sys.stderr, flush=True)
            parts = {} if args.parts and not cached else None  # the many-configuration scenario's
            items, totals, ratios = _scenario(model, tok, args, tasks, configs, cached, per_chunk, chunks, data_dir,
                                              warmup=model.device.type == "cuda", parts=parts)
            if parts:
                where.append(_where(pack, label, items, parts))
            for way in [w for w in totals if w != "before"]:
                per = ratios[way]
                rows.append(f"| {pack} | {label} | {way} | {items} | {totals['before'] / items:.3f} | "
                            f"{totals[way] / items:.3f} | **{totals['before'] / totals[way]:.2f}x** | "
                            f"{statistics.median(per):.2f}x [{min(per):.2f}, {max(per):.2f}] ({len(per)} chunks) |")
    wall = time.perf_counter() - began
    command = typed_command(["benchmarks/bench_item_cost.py", *(argv if argv is not None else sys.argv[1:])],
                            program=None)  # as a user types it, no path of this machine
    v = versions()
    text = "\n".join([
        f"# What an item costs: the full model and POP configurations on the same fresh items ({args.model}"
        f"{', random weights' if args.weights == 'random' else ''})", "",
        f"- command: `{command.strip()}`",
        f"- hardware: {hardware.hardware_id}, {dtype_of(model)}; versions: poptune {v.get('poptune')}, "
        f"torch {v.get('torch')}, transformers {v.get('transformers')}",
        f"- items: fresh items (positions 32 on of each task's fixed order), batch 8, in chunks of "
        f"{args.per_chunk} per task (long pack: {args.long_per_chunk}); the ways back to back in every chunk, order "
        "alternating" + ("; one chunk run untimed before each scenario (a GPU warms up)" if model.device.type == "cuda"
                         else "") + f"; wall time of the benchmark: {wall / 60:.1f} min",
        f"- the {len(many)} configurations: {', '.join(many)}",
        "- before: the full model's pass, then each configuration's own pass (the per-configuration engine); after: "
        "the shared trunk (`poptune/engine/trunk.py`); cached: the full model's answers remembered, the candidate's "
        "own pass only; full model alone: its own pass and nothing else, the floor of an item no run has scored "
        "before (its ratio is the most any sharing can give there)",
        "- null check: every way gave every configuration the same outcome on every item (the run stops otherwise)",
        "",
        "| workload | scored | way | items | before s/item | s/item | before/way (sums) | per chunk: median [range] |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | --- |",
        *rows, "", *where,
        "Targets (issue 56): >= 1.6x for one candidate with nothing cached; cached within 10% of 1 + the "
        "candidate's prefill speedup (about 2.2x for 5/window-64/0); >= 4x for 8 configurations.",
        "",
        "Ratios are measured side by side in one process; absolute times are indicative"
        + (" (a shared 2-core CPU)." if hardware.kind == "cpu" else "."), ""])
    name = "gemma-3-270m" if args.model == "gemma-3" else args.model
    name += "-random" if args.weights == "random" else ""
    out = Path(args.out) if args.out else ROOT / "leaderboards" / f"item-cost-{name}-{hardware.hardware_id}.md"
    out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
