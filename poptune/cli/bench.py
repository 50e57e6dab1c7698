"""``poptune bench``: POP against the full model, side by side, at several prompt lengths."""

from __future__ import annotations

import argparse
from typing import Any


from ._args import add_model, add_pop, check_output_path, int_list, pop_config, write_text


def register(sub: Any) -> None:
    parser = sub.add_parser("bench", help="time POP prefill and decode against the full model")
    add_model(parser)
    add_pop(parser)
    parser.add_argument("--lengths", help="text prompt lengths in tokens (default: 128,512,2048)")
    parser.add_argument("--image", metavar="WxH[,WxH...]",
                        help="image prompts instead (a vision-language model): one image of each size and a short "
                             "question, e.g. 640x480,1280x720,2560x1440")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--decode-tokens", type=int, default=16, help="new tokens per decode measurement (0: none)")
    parser.add_argument("--repeats", type=int, default=5, help="least POP/full pairs per measurement (default: 5)")
    parser.add_argument("--min-seconds", type=float, default=2.0, help="least time per measurement (default: 2)")
    parser.add_argument("--json", metavar="PATH", help="also write the result, with the hardware record, as JSON")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from poptune.errors import ConfigError
    from poptune.measure import RepeatPolicy
    from poptune.measure.bench import BenchSpec, run_bench
    from poptune.models.vision import check_takes_images, parse_image_sizes

    config = pop_config(args)
    images = parse_image_sizes(args.image, "--image") if args.image is not None else ()
    if images and args.lengths is not None:
        raise ConfigError("give `--lengths` (text prompts) or `--image` (image prompts), not both")
    if images:
        check_takes_images(args.model)  # a text-only model poptune knows is refused before it loads
    spec = BenchSpec(
        lengths=tuple(int_list(args.lengths or "128,512,2048", "--lengths")),
        images=images,
        batch_size=args.batch_size,
        decode_tokens=args.decode_tokens,
        policy=RepeatPolicy(warmup=1, min_repeats=args.repeats, min_seconds=args.min_seconds),
    )
    if args.json:
        check_output_path(args.json)

    from tqdm import tqdm

    from poptune.engine import decoder_of
    from poptune.models import load_model

    model, tokenizer = load_model(args.model, device=args.device, dtype=args.dtype, weights=args.weights)
    config.check(len(decoder_of(model).layers))
    steps = len(spec.images or spec.lengths) * (2 if spec.decode_tokens else 1)
    with tqdm(total=steps, desc="bench", unit="measurement", leave=False) as bar:

        def progress(done: str) -> None:
            bar.update(1)
            bar.set_postfix_str(done)

        result = run_bench(model, tokenizer, config, spec, model_name=args.model, progress=progress)

    hw = result.hardware
    print(f"{args.model} [{config}] on {hw.hardware_id} ({result.dtype}, batch {spec.batch_size})")
    if images:
        from poptune.measure.prompts import IMAGE_QUESTION

        print(f"prompt: one image of each size, then {IMAGE_QUESTION!r}; length = all prompt tokens")
    print(result.table())
    for note in hw.notes:
        print(f"note: {note}")
    print("speedup: median of per-pair full/POP prefill ratios, interleaved; ideal: from FLOPs"
          + (" (the vision encoder counted on both sides)" if images else ""))
    if args.json:
        write_text(args.json, result.to_json())
        print(f"wrote {args.json}")
    return 0
