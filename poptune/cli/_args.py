"""Arguments shared by several commands."""

from __future__ import annotations

import argparse

from poptune.device import DTYPES
from poptune.engine import BOUNDARIES, PopConfig


def add_model(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("model")
    group.add_argument("--model", default="gemma-3", help="registered name or local directory (default: gemma-3)")
    group.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default: cpu)")
    group.add_argument("--dtype", choices=DTYPES, default=None, help="default: float32 on CPU, bfloat16 on CUDA")
    group.add_argument("--weights", choices=("pretrained", "random"), default="pretrained")


def add_pop(parser: argparse.ArgumentParser, *, skip_required: bool = True) -> None:
    group = parser.add_argument_group("POP configuration")
    group.add_argument("--skip", type=int, required=skip_required, help="layers skipped in prefill")
    group.add_argument("--boundary", default="last", help=f"one of {', '.join(BOUNDARIES)} (default: last)")
    group.add_argument("--offset", type=int, default=0, help="final layers kept even in prefill (default: 0)")


def pop_config(args: argparse.Namespace) -> PopConfig:
    return PopConfig(skip=args.skip, boundary=args.boundary, offset=args.offset)
