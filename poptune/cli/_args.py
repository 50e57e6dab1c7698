"""Arguments shared by several commands."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from poptune.device import DTYPES
from poptune.engine import BOUNDARIES, PopConfig
from poptune.errors import ConfigError


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


def int_list(text: str, option: str) -> list[int]:
    """``"128,512"`` -> ``[128, 512]``, or a one-line ConfigError naming the option."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as e:
        raise ConfigError(f"`{option}` must be comma-separated integers, got {text!r}") from e
    if not values:
        raise ConfigError(f"`{option}` must name at least one value")
    return values


def check_output_path(path: str) -> None:
    """Fail before any work if ``path`` cannot be written later."""
    target = Path(path)
    if target.is_dir():
        raise ConfigError(f"{path} is a directory, not a file path")
    if not target.parent.exists() and str(target.parent) not in ("", "."):
        raise ConfigError(f"the folder of {path} does not exist")


def write_text(path: str, text: str) -> None:
    """Write atomically: a temporary file beside the target, then a rename (no half-written file)."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        tmp.write_text(text + "\n")
        os.replace(tmp, target)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise ConfigError(f"cannot write {path}: {e.strerror or e}") from e
