"""Benchmark: the K/V cache of one request under POP configurations, in bytes (issue 48: anchor K/V's memory).

Usage::

    python benchmarks/kv_bytes.py --model gemma-3 --length 2048 --configs 6:window-64:0:own,6:window-64:0:anchor

Each configuration is ``skip:boundary[:offset[:kv]]`` (as ``accuracy_sweep.py`` takes them); the full model is
measured first. One prompt of ``--length`` tokens of real text is prefilled under each (its attention mask given,
as ``generate`` gives it) and the cache it leaves is weighed tensor by tensor
(:func:`poptune.measure.prefill.cache_bytes`), then per layer: tokens held and bytes. Prints a Markdown table.
"""

from __future__ import annotations

import argparse

import torch

from poptune.engine import PopConfig, apply_pop
from poptune.kvfit.prepare import prepare_kv
from poptune.measure.prefill import cache_bytes
from poptune.measure.timing_prompts import prompt_batch
from poptune.models import load_model
from poptune.models.registry import weights_fingerprint


def _parse(text: str) -> list[PopConfig]:
    configs = []
    for part in text.split(","):
        fields = part.split(":")
        configs.append(PopConfig(int(fields[0]), fields[1] if len(fields) > 1 else "last",
                                 int(fields[2]) if len(fields) > 2 else 0,
                                 **({"kv": fields[3]} if len(fields) > 3 else {})))
    return configs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3")
    parser.add_argument("--length", type=int, default=2048)
    parser.add_argument("--configs", default="6:window-64:0:own,6:window-64:0:anchor")
    args = parser.parse_args()
    model, tokenizer = load_model(args.model)
    inputs = prompt_batch(tokenizer, args.length, 1)
    print(f"{args.model}, one request of {args.length} tokens: the K/V cache after its prefill\n")
    print("| configuration | K/V bytes | MiB | vs full | tokens held per layer |")
    print("|---|---:|---:|---:|---|")
    full = None
    for config in [PopConfig(0), *_parse(args.configs)]:
        prepare_kv(model, tokenizer, config, fingerprint=weights_fingerprint(args.model))
        with apply_pop(model, config), torch.inference_mode():
            cache = model(**inputs, use_cache=True, logits_to_keep=1).cache
        size = cache_bytes(cache)
        full = full or size
        held = ",".join(str(layer.keys.shape[-2]) for layer in cache.layers)
        print(f"| {config} | {size:,} | {size / 2 ** 20:.2f} | {size / full:.3f} | {held} |", flush=True)


if __name__ == "__main__":
    main()
