"""Benchmark: POP against the full model on this machine, written to ``leaderboards/`` with provenance.

Runs, for one model (default: the embedded Gemma-3-270M):

1. ``skip`` (default 6 = a third of 18 layers), ``boundary=last``: prefill (time to first token) and decode
   per-token latency at each prompt length, interleaved with the full model; speedup = median of per-pair
   ratios; the FLOPs ideal beside it.
2. The engine's own overhead: ``skip=0`` (POP applied, nothing skipped) against the plain model.

Usage::

    python benchmarks/bench_prefill.py [--model gemma-3] [--skip 6] [--lengths 128,512,2048] [--device cpu]

Writes ``leaderboards/prefill-<model>-<hardware-id>.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from poptune import PopConfig, load_model
from poptune.measure import RepeatPolicy
from poptune.measure.bench import BenchResult, BenchSpec, run_bench
from poptune.measure.provenance import typed_command

ROOT = Path(__file__).resolve().parents[1]


def _markdown(command: str, main: BenchResult, overhead: BenchResult) -> str:
    hw = main.hardware
    lines = [
        f"# POP prefill benchmark: {main.model} on {hw.hardware_id}",
        "",
        f"Configuration: `{main.config}`, {main.dtype}, batch {main.spec.batch_size}. "
        "Speedup = median of per-pair (full / POP) time-to-first-token ratios, POP and full model interleaved in "
        "one process on the same real token ids; ideal = FLOPs ratio; decode = per-token latency over "
        f"{main.spec.decode_tokens} new tokens from each prefill's cache; decode POP/full and the overhead are "
        "medians of "
        "per-pair ratios too.",
        "",
        "| prompt tokens | full ms (p50) | POP ms (p50) | speedup | ideal | measured/ideal | decode full ms/tok "
        "| decode POP ms/tok | decode POP/full |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in main.rows:
        d = row.decode
        lines.append(
            f"| {row.length} | {row.prefill.b.p50:.1f} | {row.prefill.a.p50:.1f} | {row.speedup:.3f}x | "
            f"{row.ideal:.3f}x | {row.speedup / row.ideal:.3f} | {d.b.p50:.2f} | {d.a.p50:.2f} | "
            f"{1 / d.speedup:.3f} |"
        )
    lines += [
        "",
        "Engine overhead (`skip=0`: POP applied, nothing skipped, against the plain model):",
        "",
        "| prompt tokens | plain ms | POP skip=0 ms | overhead |",
        "|---:|---:|---:|---:|",
    ]
    for row in overhead.rows:
        lines.append(
            f"| {row.length} | {row.prefill.b.p50:.1f} | {row.prefill.a.p50:.1f} | "
            f"{100 * (1 / row.speedup - 1):+.2f}% |"
        )
    lines += [
        "",
        "## Provenance",
        "",
        f"- command: `{command}`",
        f"- date: {main.date}",
        f"- hardware: {hw.name} ({hw.hardware_id}), {hw.logical_threads} threads, torch threads "
        f"{hw.torch_num_threads}; {'; '.join(hw.notes) or 'no notes'}",
        f"- versions: {', '.join(f'{k} {v}' for k, v in main.versions.items())}",
        f"- repeats: >= {main.spec.policy.min_repeats} pairs and >= {main.spec.policy.min_seconds} s per measurement, "
        f"{main.spec.policy.warmup} warm-up pair(s)",
        "- raw values: the JSON file beside this one",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3")
    parser.add_argument("--skip", type=int, default=6)
    parser.add_argument("--boundary", default="last")
    parser.add_argument("--lengths", default="128,512,2048")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--weights", default="pretrained")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--min-seconds", type=float, default=5.0)
    parser.add_argument("--out", default=str(ROOT / "leaderboards"))
    parser.add_argument("--render", metavar="JSON", help="only re-render the Markdown of an earlier run's JSON")
    args = parser.parse_args()
    if args.render:
        data = json.loads(Path(args.render).read_text())
        main_result, overhead = BenchResult.from_dict(data["pop"]), BenchResult.from_dict(data["overhead"])
        Path(args.render).with_suffix(".md").write_text(_markdown(data["command"], main_result, overhead))
        return

    model, tokenizer = load_model(args.model, device=args.device, dtype=args.dtype, weights=args.weights)
    policy = RepeatPolicy(warmup=1, min_repeats=args.repeats, min_seconds=args.min_seconds)
    lengths = tuple(int(n) for n in args.lengths.split(","))
    spec = BenchSpec(lengths=lengths, batch_size=args.batch_size, decode_tokens=16, policy=policy)
    main_result = run_bench(model, tokenizer, PopConfig(args.skip, args.boundary), spec, model_name=args.model,
                            progress=lambda done: print(f"  done: {done}", file=sys.stderr))
    print(main_result.table())
    overhead_spec = BenchSpec(lengths=lengths, batch_size=args.batch_size, decode_tokens=0, policy=policy)
    overhead = run_bench(model, tokenizer, PopConfig(0), overhead_spec, model_name=args.model)

    command = typed_command(["benchmarks/bench_prefill.py", *sys.argv[1:]], program=None)
    stem = f"prefill-{args.model}-{main_result.hardware.hardware_id}"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.md").write_text(_markdown(command.strip(), main_result, overhead))
    (out / f"{stem}.json").write_text(
        json.dumps({"command": command.strip(), "pop": main_result.to_dict(), "overhead": overhead.to_dict()}, indent=2)
        + "\n"
    )
    print(f"wrote {out / stem}.md and .json")


if __name__ == "__main__":
    main()
