"""``poptune generate``: a demo of one configuration, with its time to first token beside the full model's."""

from __future__ import annotations

import argparse
from typing import Any

from poptune.errors import ConfigError

from ._args import add_model, add_pop, pop_config


def register(sub: Any) -> None:
    parser = sub.add_parser("generate", help="generate text with POP and compare time to first token")
    add_model(parser)
    add_pop(parser, skip_required=False)
    parser.add_argument("--config", help="an exported configuration (poptune export) instead of --skip ...")
    parser.add_argument("--force", action="store_true", help="apply --config made for another model or machine")
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if not args.prompt.strip():
        raise ConfigError("`--prompt` must not be empty")
    if args.max_new_tokens < 1:
        raise ConfigError(f"`--max-new-tokens` must be >= 1, got {args.max_new_tokens}")
    if args.config:
        if args.skip is not None:
            raise ConfigError("give --skip (and --boundary, --offset) or --config, not both")
        from poptune.export import load_config

        config = load_config(args.config, model=args.model, device=args.device, force=args.force)
    elif args.skip is None:
        raise ConfigError("give --skip (and --boundary, --offset) or --config")
    else:
        config = pop_config(args)  # validated before the model loads

    import torch

    from poptune.engine import apply_pop, decoder_of
    from poptune.measure import RepeatPolicy, Timer, measure_pair
    from poptune.measure.prefill import prefill
    from poptune.models import load_model

    model, tokenizer = load_model(args.model, device=args.device, dtype=args.dtype, weights=args.weights)
    config.check(len(decoder_of(model).layers))
    inputs = tokenizer([args.prompt], return_tensors="pt").to(model.device)

    with apply_pop(model, config), torch.inference_mode():
        output = model.generate(**inputs, max_new_tokens=args.max_new_tokens, do_sample=False)
    text = tokenizer.decode(output[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)

    pair = measure_pair(
        lambda: prefill(model, inputs, config),
        lambda: prefill(model, inputs, None),
        timer=Timer(model.device),
        policy=RepeatPolicy(warmup=1, min_repeats=5, min_seconds=0.5),
    )
    print(text)
    print(
        f"time to first token ({inputs['input_ids'].shape[1]} prompt tokens, median of {pair.a.count}): "
        f"POP {pair.a.p50:.1f} ms, full model {pair.b.p50:.1f} ms, speedup {pair.speedup:.2f}x [{config}]"
    )
    return 0
