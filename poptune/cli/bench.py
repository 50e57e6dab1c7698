"""``poptune bench``: POP against the full model, side by side, at several prompt lengths."""

from __future__ import annotations

import argparse
from typing import Any

from poptune.cli._args import (
    LibraryDefault,
    add_model,
    add_output,
    add_pop,
    add_precision,
    add_prefill_chunk,
    add_prompts,
    check_output_path,
    comma_list,
    count,
    emit,
    finite,
    int_list,
    items,
    pop_config,
    prefill_chunk,
    prepare_kv,
    write_text,
)
from poptune.cli._runtime import add_runtime, vllm_model_dir

#: The library's defaults of bench's options: the spec's fields and the default timing policy's.
SPEC, POLICY = "poptune.measure.benchrecord:BenchSpec.", "poptune.measure.benchrecord:DEFAULT_POLICY."


def register(sub: Any) -> None:
    parser = sub.add_parser("bench", help="time POP prefill and decode against the full model")
    add_model(parser)
    add_pop(parser)
    lengths = parser.add_argument("--lengths", type=comma_list,
                                  help="text prompt lengths in tokens (default: %(library_default)s)")
    lengths.library_default = LibraryDefault(SPEC + "lengths")  # shown in its help; its default None: not given
    parser.add_argument("--image", metavar="WxH[,WxH...]", type=comma_list,
                        help="image prompts instead (a vision-language model): one image of each size and a short "
                             "question, e.g. 640x480,1280x720,2560x1440")
    add_prompts(parser, store=False)
    parser.add_argument("--batch-size", type=count, default=LibraryDefault(SPEC + "batch_size"))
    parser.add_argument("--decode-tokens", type=count, default=LibraryDefault(SPEC + "decode_tokens"),
                        help="new tokens per decode measurement (0: none)")
    add_prefill_chunk(parser)
    add_precision(parser, repeats=LibraryDefault(POLICY + "min_repeats"),
                  max_pairs=LibraryDefault(POLICY + "max_repeats"), max_seconds=LibraryDefault(POLICY + "max_seconds"),
                  precision=LibraryDefault(POLICY + "precision"), stop="--repeats and --min-seconds")
    parser.add_argument("--min-seconds", type=finite, default=LibraryDefault(POLICY + "min_seconds"),
                        help="least time per measurement (default: %(default)s)")
    parser.add_argument("--order", choices=("alternate", "random", "fixed"), default=LibraryDefault(POLICY + "order"),
                        help="pair order: A-B then B-A in turn (default), blocks of both in a seeded random order, or "
                             "POP first always")
    parser.add_argument("--no-null-check", action="store_true", help="skip the A/A (full against full) pair")
    parser.add_argument("--graphs", action="store_true",
                        help="time each side's prefill as a replayed CUDA graph, so a small model's rows time its "
                             "kernels, not Python dispatch (CUDA only; decode stays eager; a prefill that cannot be "
                             "captured is timed eagerly and its row says why)")
    parser.add_argument("--energy-seconds", type=finite, default=LibraryDefault(SPEC + "energy_seconds"),
                        help="per row and side, an energy block of at least this long for joules per prefill "
                             "(0: none; else >= 1; needs NVML, else the row says why) (default: %(default)s)")
    add_runtime(parser, "text prompts, prefill only")
    add_output(parser, "the result, with the hardware record,")
    parser.set_defaults(run=run)


def _vllm_result(args: argparse.Namespace, config: Any, spec: Any, progress: Any) -> Any:
    """The run through vLLM on the model's directory."""
    from poptune.measure.vllm_bench import run_vllm_bench
    from poptune.models import load_tokenizer

    return run_vllm_bench(vllm_model_dir(args), load_tokenizer(args.model), config, spec, model_name=args.model,
                          progress=progress)


def _ready(model: Any, tokenizer: Any, config: Any, args: argparse.Namespace, spec: Any) -> Any:
    """The configuration's K/V maps attached; ``spec`` at the prompts file's lengths when one is given."""
    prepare_kv(model, tokenizer, config, args)
    return _prompt_lengths(model, tokenizer, args.prompts, spec) if args.prompts else spec


def _prompt_lengths(model: Any, tokenizer: Any, path: str, spec: Any) -> Any:
    """``spec`` timed at a prompts file's lengths: three quantile groups' medians (too-long prompts skipped)."""
    from dataclasses import replace

    from poptune.engine import decoder_of
    from poptune.evaluate.workload import build_workload

    context = getattr(decoder_of(model).config, "max_position_embeddings", None)
    workload = build_workload(tokenizer, ("prompts",), data_dir=None, cap=None, max_positions=context, prompts=path)
    points = workload.latency_points(None, 3)
    print(f"timing the prompts' lengths {[n for n, _ in points]} (shares {[round(w, 2) for _, w in points]}; "
          f"{workload.skipped.get('prompts', 0)} prompts too long, skipped)")
    return replace(spec, lengths=tuple(n for n, _ in points))


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from poptune.errors import ConfigError
    from poptune.measure import RepeatPolicy
    from poptune.measure.bench import BenchSpec, run_bench
    from poptune.models.vision import check_takes_images, parse_image_sizes

    config = pop_config(args)
    images = parse_image_sizes(",".join(items(args.image)), "--image") if args.image is not None else ()
    if images:
        if args.lengths is not None:
            raise ConfigError("give `--lengths` (text prompts) or `--image` (image prompts), not both")
        check_takes_images(args.model)  # a text-only model poptune knows is refused before it loads
    spec = BenchSpec(
        lengths=tuple(int_list(args.lengths, "--lengths")) if args.lengths
        else LibraryDefault(SPEC + "lengths").value(),
        images=images,
        batch_size=args.batch_size,
        decode_tokens=args.decode_tokens,
        policy=RepeatPolicy(warmup=1, min_repeats=args.repeats, min_seconds=args.min_seconds,
                            max_repeats=max(args.max_pairs, args.repeats), precision=args.precision or None,
                            max_seconds=args.max_seconds, order=args.order),
        null_check=not args.no_null_check,
        graphs=args.graphs,
        energy_seconds=args.energy_seconds,
        prefill_chunk=prefill_chunk(args),
    )
    if args.out:
        check_output_path(args.out)

    from tqdm import tqdm

    if args.runtime == "vllm":
        spec = replace(spec, decode_tokens=0)
    steps = len(spec.images or spec.lengths) * (2 if spec.decode_tokens else 1) + spec.null_check
    with tqdm(total=steps, desc="bench", unit="measurement", leave=False) as bar:

        def progress(done: str) -> None:
            bar.update(1)
            bar.set_postfix_str(done)

        if args.runtime == "vllm":
            result = _vllm_result(args, config, spec, progress)
        else:
            from poptune.engine import decoder_of
            from poptune.models import load_model

            model, tokenizer = load_model(args.model, device=args.device, dtype=args.dtype, weights=args.weights)
            config.check(len(decoder_of(model).layers))
            spec = _ready(model, tokenizer, config, args, spec)
            result = run_bench(model, tokenizer, config, spec, model_name=args.model, progress=progress,
                               weights=args.weights)

    if args.json:
        emit(args, "", result.to_json())
        return 0
    _print_result(args, config, spec, result, images)
    return 0


def _print_result(args: argparse.Namespace, config: Any, spec: Any, result: Any, images: Any) -> None:
    """The bench's table and notes, and its JSON file where ``--out`` asks for one."""
    hw = result.hardware
    chunked = f", prefill in chunks of {spec.prefill_chunk} tokens" if spec.prefill_chunk else ""
    print(f"{args.model} [{config}] on {hw.hardware_id} ({result.dtype}, batch {spec.batch_size}{chunked})")
    if images:
        from poptune.measure.timing_prompts import IMAGE_QUESTION

        print(f"prompt: one image of each size, then {IMAGE_QUESTION!r}; length = all prompt tokens")
    print(result.table())
    for note in hw.notes:
        print(f"note: {note}")
    print("speedup: median of per-pair full/POP prefill ratios (pairs alternate POP-full, full-POP), 95% bootstrap "
          "interval over pairs; ideal: from FLOPs" + (" (the vision encoder counted on both sides)" if images else "")
          + f"; {result.ideal_assumption}; '!': above the ideal by more than the interval")
    _print_timing(result)
    _print_null_check(result)
    if args.out:
        write_text(args.out, result.to_json())
        print(f"wrote {args.out}")


def _print_timing(result: Any) -> None:
    """Why energy per prefill is missing, and where CUDA graphs were asked for but did not apply (once each)."""
    energy = {row.energy_figures()["energy_reason"] for row in result.rows} - {None}
    if result.provenance.get("runtime") == "vllm":
        energy = {"not measured through vLLM"}
    graphs = {row.timing["reason"] for row in result.rows if row.timing and row.timing["reason"]}
    for note in sorted(energy):
        print(f"energy per prefill: {note}")
    for note in sorted(graphs):
        print(f"CUDA graphs: {note}")


def _print_null_check(result: Any) -> None:
    check = result.null_check
    if check is None:
        return
    if check.aa is not None:
        aa = check.aa
        level = f"{aa['confidence']:.0%} " if "confidence" in aa else ""
        print(f"A/A check (full against full at {check.length}): {aa['speedup']:.3f} {level}[{aa['lo']:.3f}, "
              f"{aa['hi']:.3f}], {aa['pairs']} pairs")
    load = result.provenance.get("load_start"), result.provenance.get("load_end")
    if check.noisy:
        print(f"TOO NOISY: the machine was too noisy to trust these speedups (load {load[0]} -> {load[1]}):")
        for reason in check.reasons:
            print(f"  {reason}")
    else:
        shown = f"A/A shown within 1 +- {check.aa['margin']:.0%}, " if check.aa and "margin" in check.aa else ""
        print(f"null checks passed: {shown}no decode interval excludes 1 +- {check.tolerance:.0%} "
              f"(load {load[0]} -> {load[1]})")
    wide = result.imprecise()
    if wide:
        listed = ", ".join(f"{label} +-{width:.1%}" for label, width in wide.items())
        print(f"IMPRECISE: the +-{result.spec.policy.precision:.0%} target was not reached within the caps "
              f"(--max-pairs, --max-seconds): {listed}; a busy machine widens intervals")
