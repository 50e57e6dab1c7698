"""``poptune importance``: the virtual-gate analysis -- which layers matter for prefill, which for decode."""

from __future__ import annotations

import argparse
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from poptune.cli._args import PAPER_RATIO, LibraryDefault, add_model, add_option, count, finite, seed, write_text
from poptune.errors import ConfigError
from poptune.files import check_writable_folder, safe_name


def register(sub: Any) -> None:
    parser = sub.add_parser("importance", help="per-layer prefill and decode importance from virtual gates")
    add_model(parser)
    spec = "poptune.baselines.importance:ImportanceSpec."  # the library's defaults
    parser.add_argument("--samples", type=count, default=LibraryDefault(spec + "samples"),
                        help="calibration samples (default: %(default)s)")
    parser.add_argument("--length", type=count, default=LibraryDefault(spec + "prompt_tokens"),
                        help="prompt tokens per sample (default: %(default)s)")
    parser.add_argument("--new-tokens", type=count, default=LibraryDefault(spec + "new_tokens"),
                        help="tokens sampled from the model per sample; the loss is theirs (default: %(default)s)")
    parser.add_argument("--batch-size", type=count, default=LibraryDefault(spec + "batch_size"),
                        help="samples per forward/backward (default: %(default)s)")
    add_option(parser, "--data-dir")  # its WikiText-2 for the prompts; without: prompts sampled from the model
    parser.add_argument("--out", default=".", help="folder for importance-<model>-<hardware>.json and .png "
                        "(default: .)")
    parser.add_argument("--seed", type=seed, default=LibraryDefault(spec + "seed"),
                        help="seed of the sampling generator (default: %(default)s)")
    parser.add_argument("--ratio", type=finite, default=PAPER_RATIO,
                        help="prefill pruning ratio of the proposed block (default: 1/3, the paper's)")
    parser.set_defaults(run=run)


def _command(args: argparse.Namespace) -> str:
    """The effective command line, every option spelled out (what reproduces the result), as a user types it
    (:func:`~poptune.measure.provenance.typed_command`: no path of this machine)."""
    from poptune.measure.provenance import typed_command

    words = ["importance", "--model", args.model, "--samples", args.samples, "--length", args.length,
             "--new-tokens", args.new_tokens, "--batch-size", args.batch_size, "--seed", args.seed,
             "--device", args.device]
    if args.dtype:
        words += ["--dtype", args.dtype]
    if args.weights != "pretrained":
        words += ["--weights", args.weights]
    if args.data_dir:
        words += ["--data-dir", args.data_dir]
    return typed_command([str(word) for word in words])


def run(args: argparse.Namespace) -> int:
    from poptune.baselines.importance import ImportanceSpec
    from poptune.kvfit.calibration import calibration_file

    spec = ImportanceSpec(samples=args.samples, prompt_tokens=args.length, new_tokens=args.new_tokens,
                          batch_size=args.batch_size, seed=args.seed)
    if not 0 < args.ratio < 1:
        raise ConfigError(f"`--ratio` must be in (0, 1), got {args.ratio}")
    out = Path(args.out)
    if not out.is_dir():
        raise ConfigError(f"`--out` must be an existing folder, got {args.out}")
    check_writable_folder(out)  # a read-only folder fails now, not after the analysis
    calibration_file(args.data_dir)  # a missing data file fails now, not after loading the model

    from tqdm import tqdm

    from poptune.baselines.importance import compute_importance, importance_plot, propose_block
    from poptune.models import load_model, resolve_model

    name = resolve_model(args.model).name
    slug = re.sub(r"[^a-z0-9.-]+", "-", Path(name).name.lower()).strip("-") or "model"
    model, tokenizer = load_model(args.model, device=args.device, dtype=args.dtype, weights=args.weights)
    with tqdm(total=spec.samples, desc="importance", unit="sample", leave=False) as bar:

        def progress(done: int) -> None:
            bar.update(done - bar.n)

        result = compute_importance(model, tokenizer, spec, model_name=name, data_dir=args.data_dir,
                                    progress=progress)
    result = replace(result, command=_command(args))
    stem = f"importance-{slug}-{safe_name(result.hardware_id or 'unknown')}"  # leaderboards/README.md's naming scheme
    json_path, png_path = out / f"{stem}.json", out / f"{stem}.png"
    write_text(str(json_path), result.to_json())
    importance_plot(result, png_path)

    print(f"{name}: virtual-gate importance, {spec.samples} samples of {spec.prompt_tokens} prompt + "
          f"{spec.new_tokens} sampled tokens ({result.source}), {result.seconds:.1f} s on {result.hardware_id}")
    print(result.table())
    proposal = propose_block(result.prefill, args.ratio)
    block = proposal.skipped_layers(result.num_layers)
    assert isinstance(block, range)  # a proposal is a contiguous block, not a list of layers
    share = sum(result.prefill[i] for i in block) / (sum(result.prefill) or 1.0)
    print(f"proposed at ratio {args.ratio:.2f}: {proposal} (layers {block.start}-{block.stop - 1}, "
          f"{share:.1%} of the total prefill importance)")
    print(f"wrote {json_path} and {png_path}")
    return 0
