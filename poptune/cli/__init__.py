"""The ``poptune`` command line: one subcommand per module in this package.

Every user error (a :class:`~poptune.errors.PoptuneError` or a malformed argument) is reported as one line on
stderr with exit code 2; nothing is written in that case.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from poptune.cli import (
    baseline,
    bench,
    compare,
    envs,
    eval,
    export,
    generate,
    gpucheck,
    grid,
    importance,
    leaderboard,
    pareto,
    study,
    tuners,
)
from poptune.cli._checks import check_args
from poptune.cli._options import resolve_defaults
from poptune.errors import PoptuneError

__all__ = ["main"]

_COMMANDS = (generate, bench, eval, study, pareto, export, envs, baseline, compare, leaderboard, importance, grid,
             tuners, gpucheck)


def version() -> str:
    """``poptune X.Y.Z``: the installed distribution's version (package metadata)."""
    from poptune.version import installed_version

    found = installed_version()
    return "poptune (version unknown: the package is not installed)" if found == "unknown" else f"poptune {found}"


class _Version(argparse.Action):
    """``--version``, reading the package metadata only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        print(version())  # stdout, as argparse's own version action does
        parser.exit(0)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not argparse's usage block
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="poptune", description="Benchmark and auto-tune Prefill-Only Pruning (POP).")
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for command in _COMMANDS:
        command.register(sub)
    return parser


def _check_encoding(argv: list[str]) -> None:
    """Refuse an argument that is not valid UTF-8 (Python keeps its bytes as lone surrogates) in one line."""
    for position, arg in enumerate(argv, 1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            shown = arg.encode("utf-8", "backslashreplace").decode()
            print(f"poptune: error: argument {position} is not valid UTF-8: {shown!r}", file=sys.stderr)
            raise SystemExit(2) from None


def _check_double_dash(argv: list[str]) -> None:
    """Refuse ``--option=--`` in one line: Python's argparse drops the ``--`` and stores an empty list, which no
    command can use (a traceback later, or a file named ``[]``)."""
    for arg in argv:
        if arg.startswith("-") and arg.endswith("=--"):
            print(f"poptune: error: argument {arg[:-3]}: expected one argument (`--` is not a value)", file=sys.stderr)
            raise SystemExit(2)


def main(argv: Sequence[str] | None = None) -> int:
    process = argv is None  # the program itself, not a caller in the same process (tests)
    argv = list(sys.argv[1:] if argv is None else argv)
    _check_encoding(argv)
    _check_double_dash(argv)
    args = build_parser().parse_args(argv)
    args.argv = argv  # a command that starts workers hands them the same options
    try:
        resolve_defaults(args)  # the library's defaults, read now that a command runs
        check_args(args)  # every argument, before any work
        code = args.run(args) or 0
        if code in (130, 143) and process:
            # Interrupted, and everything stored is committed: skip the interpreter's slow teardown (seconds
            # of torch and thread clean-up) so that the process ends within moments of the signal.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        return code
    except PoptuneError as e:
        print(f"poptune {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("poptune: interrupted", file=sys.stderr)
        return 130
