"""The command line's contract under drawn flag values (Hypothesis, seeded, a few seconds).

Every command's options are read from the parser itself (:func:`poptune.cli.build_parser`), so a new option is
fuzzed without touching this file. Each example runs ``poptune CMD`` in-process, in a scratch folder that is its
working directory, ``$HOME`` and cache, with flag values drawn from numbers (NaN, infinities, negatives, huge),
strings (empty, unicode, ``.``, ``/``, very long), unknown models and malformed storage URLs. The contract:
exit 0, or exit 2 with exactly one line on stderr and no traceback, and a refusal touches no file. No real work
runs: loading a model is where work starts, and it ends the example there (as an accepted command).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from poptune.cli import build_parser, main

#: Options never drawn: ``--gpus`` starts worker processes (on a CUDA machine); help and version exit 0 at once.
SKIPPED = {"--gpus", "-h", "--help", "--version"}

#: What each command is given before the drawn options (argparse keeps the last value of a repeated option).
BASE = {
    "generate": ["--model", "tiny-llama", "--skip", "1", "--prompt", "hi"],
    "bench": ["--model", "tiny-llama", "--skip", "1", "--lengths", "16"],
    "eval": ["--model", "tiny-llama", "--skip", "1", "--tasks", "passkey"],
    "study": ["--model", "tiny-llama", "--tasks", "passkey", "--lengths", "300"],
    "baseline": ["--model", "tiny-llama", "--method", "shortgpt", "--tasks", "passkey", "--lengths", "300"],
    "importance": ["--model", "tiny-llama"],
    # The check itself measures (exit 1 when a measurement fails, as a test runner does): its flags are fuzzed on
    # the dry run, which does no device work.
    "gpu-check": ["--dry-run"],
    "export": ["--max-drop", "1"],
}


class WorkStarted(BaseException):
    """Raised where a model would load: the arguments were accepted (a BaseException: no handler swallows it)."""


def _commands() -> dict[str, list[argparse.Action]]:
    """Each subcommand's options, from the parser."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name: [a for a in p._actions if a.option_strings and not set(a.option_strings) & SKIPPED]
            for name, p in sub.choices.items()}


COMMANDS = _commands()

NUMBERS = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.integers(min_value=-3, max_value=20).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["nan", "inf", "-inf", "NaN", "1e999", "-0", "0", "1", "0.5", "1_000", " 3 ", "0x10", "none"]),
)
TEXT = st.one_of(
    st.sampled_from(["", " ", ".", "/", "..", "x" * 300, "é", "名前", "a,b", ",", "-", "--", "1,2,3", "-1,5",
                     "sqlite://", "sqlite:///", "sqlite:///nowhere/x.db", "journal:", "journal:.", "mysql://u@h/db",
                     "redis://h", "file:///x", "::", "no-such-model", "gemma-3-999b", "tiny-llama", "s.json",
                     "window-0", "last", "none", "calibrated", "own,bogus", "all", "64x48", "9/last/0"]),
    st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=12),
)


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    """``[command, *base, *drawn options]``."""
    name = draw(st.sampled_from(sorted(COMMANDS)))
    argv = [name, *BASE.get(name, [])]
    options = COMMANDS[name]
    for action in draw(st.lists(st.sampled_from(options), max_size=3, unique_by=lambda a: a.dest)) if options else []:
        flag = draw(st.sampled_from(action.option_strings))
        if action.nargs == 0:
            argv.append(flag)
            continue
        if action.choices:
            value = draw(st.one_of(st.sampled_from(sorted(map(str, action.choices))), TEXT))
        else:
            value = draw(st.one_of(NUMBERS, TEXT))
        argv.append(f"{flag}={value}")  # "=": a value starting with "-" is a value, not an option
    return argv


def _files(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


def _run(argv: list[str], root: Path) -> tuple[int, str, bool, argparse.Namespace | None]:
    """Exit code, stderr, whether work started (a model load) and the parsed arguments, running in ``root``."""
    err = io.StringIO()
    started = False
    parsed: list[argparse.Namespace] = []
    parse_args = argparse.ArgumentParser.parse_args

    def load_model(*args: object, **kwargs: object) -> None:
        raise WorkStarted

    def record(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> argparse.Namespace:
        parsed.append(parse_args(self, *args, **kwargs))
        return parsed[-1]

    with pytest.MonkeyPatch.context() as mp:
        for name in ("HOME", "POPTUNE_CACHE", "XDG_CACHE_HOME"):
            mp.setenv(name, str(root / "home" if name == "HOME" else root / "cache"))
        mp.setenv("POPTUNE_KV_MAPS", str(root / "cache" / "kv-maps"))
        mp.delenv("POPTUNE_DATA", raising=False)
        mp.setattr("poptune.models.load_model", load_model)
        mp.setattr("poptune.models.registry.load_model", load_model)
        mp.setattr(argparse.ArgumentParser, "parse_args", record)
        mp.chdir(root / "work")
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                code = main(argv)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 2
            except WorkStarted:
                code, started = 0, True
    return code, err.getvalue(), started, parsed[0] if parsed else None


@settings(max_examples=100, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(argv=command_lines())
def test_every_command_line_is_accepted_or_refused_in_one_line(argv):
    with tempfile.TemporaryDirectory(prefix="poptune-fuzz-") as folder:
        root = Path(folder)
        for name in ("work", "home", "cache"):
            (root / name).mkdir()
        (root / "work" / "notes.txt").write_text("the user's file\n")
        before = _files(root)
        code, err, started, args = _run(argv, root)
        assert "Traceback" not in err, (argv, err)
        assert code in (0, 2), (argv, code, err)
        if code == 0 and args is not None:  # accepted: no number is NaN or infinite (read as "no limit")
            numbers = {k: v for k, v in vars(args).items() if isinstance(v, float)}
            assert all(math.isfinite(v) for v in numbers.values()), (argv, numbers)
        if code == 2:
            assert len(err.strip().splitlines()) == 1, (argv, err)
            assert _files(root) == before, (argv, "a refusal touched files")
        assert (root / "work" / "notes.txt").read_text() == "the user's file\n"
        assert not _files(root / "home"), (argv, "files written in $HOME outside the poptune cache")


def test_every_command_is_fuzzed():
    assert {"generate", "bench", "eval", "study", "pareto", "export", "envs", "baseline", "leaderboard",
            "importance"} <= set(COMMANDS)
    assert all(os.fspath(a.option_strings[0]).startswith("--") for options in COMMANDS.values() for a in options)
