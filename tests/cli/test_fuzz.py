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
import signal
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


#: Seconds an example may run before it counts as hung (a stale lock is released after 3 s here).
HANG_S = 60


class Hung(BaseException):
    """Raised in an example still running after :data:`HANG_S` seconds (a hang is a failure, never a wait)."""


def _hung(signum: int, frame: object) -> None:
    raise Hung(f"the command was still running after {HANG_S} s")


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
#: Issue 49: paths that are not regular files, made in each example's working folder by :func:`_hostile` (links
#: to devices, a FIFO, a link to nothing, a journal whose stale lock links to a relative name), and names at the
#: study-name limit; drawn for every option, as file paths and inside storage URLs.
LIMIT_NAME = "n" * 238
PATHS = st.one_of(
    st.sampled_from(["fifo", "null", "full", "dangling", "folder", "studies", "studies/s.journal", LIMIT_NAME,
                     "x" * 239, f"{LIMIT_NAME}.json"]),
    st.sampled_from(["journal:", "sqlite:///"]).flatmap(lambda scheme: st.sampled_from(
        [f"{scheme}{p}" for p in ("fifo", "null", "full", "dangling", "folder", "studies/s.journal", "studies/s.db",
                                  "{abs}/studies/s.journal", "{abs}/null")])),
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
            value = draw(st.one_of(NUMBERS, TEXT, PATHS))
        argv.append(f"{flag}={value}")  # "=": a value starting with "-" is a value, not an option
    return argv


def _files(root: Path) -> dict[str, int]:
    """Regular files by size (a journal's stale lock, released after its grace, is not the user's file)."""
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*")
            if p.is_file() and not p.is_symlink() and not p.name.endswith(".lock")}


def _hostile(work: Path) -> None:
    """What :data:`PATHS` names: a FIFO, links to ``/dev/null``, ``/dev/full`` and to nothing, a folder, and a
    journal with a stale lock linking to a relative name (what a killed writer left before issue 49)."""
    os.mkfifo(work / "fifo")
    (work / "null").symlink_to("/dev/null")
    (work / "full").symlink_to("/dev/full" if os.path.exists("/dev/full") else "/dev/null")
    (work / "dangling").symlink_to(work / "missing" / "x")
    (work / "folder").mkdir()
    (work / "studies").mkdir()
    (work / "studies" / "s.journal").write_bytes(_JOURNAL)
    (work / "studies" / "s.journal.lock").symlink_to("studies/s.journal")


def _intact(work: Path) -> None:
    """The hostile paths are what :func:`_hostile` made, and the devices still devices."""
    import stat

    assert stat.S_ISFIFO(os.lstat(work / "fifo").st_mode)
    assert all((work / name).is_symlink() for name in ("null", "full", "dangling"))
    for device in ("/dev/null", "/dev/full"):
        assert not os.path.exists(device) or stat.S_ISCHR(os.stat(device).st_mode), f"{device} is not a device"


def _journal() -> bytes:
    """The bytes of a journal holding one empty study (another tool's: commands refuse it or read it)."""
    import optuna
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with tempfile.TemporaryDirectory() as folder:
        optuna.create_study(storage=JournalStorage(JournalFileBackend(f"{folder}/j")), study_name="other")
        return Path(f"{folder}/j").read_bytes()


_JOURNAL = _journal()


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

    def guarded(real):  # a rename onto anything outside the example's folder fails instead (we run as root)
        def rename(src, dst, *args, **kwargs):
            target = os.path.realpath(dst)
            assert target.startswith(os.path.realpath(root) + os.sep), f"a rename onto {target} was stopped"
            return real(src, dst, *args, **kwargs)
        return rename

    from optuna.storages.journal import JournalFileSymlinkLock

    from poptune.store.shared import AbsoluteSymlinkLock

    def short_grace(self, filepath, grace_period=30):  # a stale lock released in 3 s, not 30, per example
        JournalFileSymlinkLock.__init__(self, filepath, grace_period=3)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "replace", guarded(os.replace))
        mp.setattr(os, "rename", guarded(os.rename))
        mp.setattr(AbsoluteSymlinkLock, "__init__", short_grace)
        for name in ("HOME", "POPTUNE_CACHE", "XDG_CACHE_HOME"):
            mp.setenv(name, str(root / "home" if name == "HOME" else root / "cache"))
        mp.setenv("POPTUNE_KV_MAPS", str(root / "cache" / "kv-maps"))
        mp.delenv("POPTUNE_DATA", raising=False)
        mp.setattr("poptune.models.load_model", load_model)
        mp.setattr("poptune.models.registry.load_model", load_model)
        mp.setattr(argparse.ArgumentParser, "parse_args", record)
        mp.chdir(root / "work")
        argv = [a.replace("{abs}", str(root / "work")) for a in argv]
        previous = signal.signal(signal.SIGALRM, _hung)
        signal.alarm(HANG_S)  # a FIFO read or a lock that never frees fails the example, not the whole run
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                code = main(argv)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 2
            except WorkStarted:
                code, started = 0, True
            finally:
                signal.alarm(0)
                signal.signal(signal.SIGALRM, previous)
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
        _hostile(root / "work")
        before = _files(root)
        code, err, started, args = _run(argv, root)
        _intact(root / "work")
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


# Issue 57: the files the commands read, drawn too: schema-valid ones, tampered ones (a field dropped or replaced by
# any JSON value) and deep nesting, for `leaderboard --records`, `generate --config` and `--init-from-importance`.

JSON = st.recursive(st.none() | st.booleans() | st.integers(-(10**20), 10**20) | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=12)


def _valid_files() -> dict[str, object]:
    import json

    from poptune.baselines.importance import ImportanceResult, ImportanceSpec
    from poptune.reports.export import FORMAT

    root = Path(__file__).resolve().parents[2]
    record = json.loads((root / "leaderboards" / "raw" /
                         "methods-long-prompts-gemma-3-270m-cpu-intel-xeon-processor-2t.json").read_text())
    importance = ImportanceResult(model="tiny-llama", prefill=(1.0,) * 6, decode=(1.0,) * 6,
                                  spec=ImportanceSpec(samples=4, prompt_tokens=16, new_tokens=4), source="generated",
                                  loss=3.0, seconds=1.0, dtype="float32", device="cpu").to_dict()
    config = {"format": FORMAT, "pop_config": {"skip": 1, "boundary": "last", "offset": 0},
              "model": {"name": "tiny-llama"}, "hardware": {"hardware_id": "cpu-x"}}
    return {"record": record, "config": config, "importance": importance}


VALID = _valid_files()

#: Each file kind: the command that reads it (``{f}``: the file) and where the file goes.
READERS = {
    "record": (["leaderboard", "--records", "records", "--out", "board"], "records/methods-x.json"),
    "config": (["generate", "--model", "tiny-llama", "--config", "{f}", "--prompt", "hi", "--force"], "c.json"),
    "importance": (["study", "--model", "tiny-llama", "--tasks", "passkey", "--lengths", "300", "--storage",
                    "sqlite:///s.db", "--init-from-importance", "{f}"], "imp.json"),
}


@st.composite
def file_texts(draw: st.DrawFn) -> tuple[str, str]:
    """``(kind, text)``: a file of one kind, valid, tampered at one field (at any depth), or deeply nested."""
    import copy
    import json

    kind = draw(st.sampled_from(sorted(READERS)))
    how = draw(st.sampled_from(["valid", "tampered", "tampered", "tampered", "deep", "any"]))
    if how == "deep":
        depth = draw(st.sampled_from([1000, 100_000]))
        return kind, draw(st.sampled_from(["[" * depth + "]" * depth, '{"a":' * depth + "1" + "}" * depth]))
    if how == "any":
        return kind, json.dumps(draw(JSON))
    data = copy.deepcopy(VALID[kind])
    if how == "tampered":
        node = data
        for _ in range(draw(st.integers(0, 3))):  # down a few levels, then one field dropped or replaced
            children = (list(node) if isinstance(node, dict) else list(range(len(node))) if isinstance(node, list)
                        else [])
            if not children or not isinstance(node[children[0]] if isinstance(node, list) else True, object):
                break
            key = draw(st.sampled_from(children[:20]))
            if not isinstance(node[key], (dict, list)) or not node[key]:
                break
            node = node[key]
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        if keys:
            key = draw(st.sampled_from(keys[:20]))
            if isinstance(node, dict) and draw(st.booleans()):
                del node[key]
            else:
                node[key] = draw(JSON)
    return kind, json.dumps(data)


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(drawn=file_texts())
def test_every_record_and_config_file_is_read_or_refused_in_one_line(drawn):
    kind, text = drawn
    argv, where = READERS[kind]
    with tempfile.TemporaryDirectory(prefix="poptune-fuzz-") as folder:
        root = Path(folder)
        for name in ("work", "home", "cache", "work/records"):
            (root / name).mkdir()
        (root / "work" / where).write_text(text)
        before = _files(root)
        code, err, _, _ = _run([a.replace("{f}", where) for a in argv], root)
        assert "Traceback" not in err, (kind, text[:300], err)
        assert code in (0, 2), (kind, text[:300], code, err)
        if code == 2:
            assert len(err.strip().splitlines()) == 1, (kind, text[:300], err)
            assert _files(root) == before, (kind, "a refusal touched files")
