"""Harness: every command against bad input; prints a Markdown table (exit code, first stderr line, files touched).

Usage::

    python -m tests.harness.bad_inputs            # every case (tiny random models; a few minutes on 2 CPUs)
    python -m tests.harness.bad_inputs -k enqueue # only cases whose name holds "enqueue"
    python -m tests.harness.bad_inputs -k issue-49 # only the hostile paths and small refusals of issue 49

Each case runs ``python -m poptune ...`` in a scratch folder holding a small stored study (``ok.db``), a study
another tool wrote (``foreign.db``), a poptune study with no completed trial (``empty.db``), a text file, a file
that is not a database and a read-only folder. "Files touched" lists every file of that folder created,
changed or removed by the case (by size, modification time and content hash): the promise is *none* for every
row, with exit code 2 and the error as the first (and only) line on stderr.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository root

#: A quick study problem on a tiny random model.
STUDY = ["study", "--model", "tiny-llama", "--tasks", "passkey", "--limit", "2", "--lengths", "300", "--repeats", "1"]
BENCH = ["bench", "--model", "tiny-llama", "--skip", "1", "--lengths", "16", "--repeats", "1", "--min-seconds", "0",
         "--decode-tokens", "0"]
EVAL = ["eval", "--model", "tiny-llama", "--skip", "1", "--tasks", "passkey", "--limit", "2", "--fidelity-pairs", "0"]
GEN = ["generate", "--model", "tiny-llama", "--max-new-tokens", "2"]
NOT_UTF8 = os.fsdecode(b"caf\xe9 \xff")

#: Writes ``foreign.db`` (an Optuna study poptune did not write) and ``empty.db`` (a poptune study, no trial yet).
OTHER_STUDIES = """
import sys, optuna
from poptune.problem.problem import TuningProblem
optuna.logging.set_verbosity(optuna.logging.WARNING)
d = sys.argv[1]
other = optuna.create_study(storage=f"sqlite:///{d}/foreign.db", study_name="other")
other.set_user_attr("owner", "another tool")
other.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
empty = optuna.create_study(storage=f"sqlite:///{d}/empty.db", study_name="empty", directions=["minimize", "maximize"])
empty.set_user_attr("problem", TuningProblem(model="tiny-llama", tasks=("passkey",), lengths=(300,)).to_dict())
empty.set_user_attr("model", "tiny-llama")
empty.set_user_attr("num_layers", 6)
"""

EXPORT = ["export", "--storage", "sqlite:///{d}/ok.db", "--max-drop", "100"]
PROMPTS_STUDY = ["study", "--model", "tiny-llama", "--limit", "2", "--repeats", "1", "--storage",
                 "sqlite:///{d}/new.db"]

#: Issue 49: output and storage paths that are not regular files (``{d}/fifo``, ``{d}/null`` and ``{d}/full``
#: link to those devices, ``{d}/dangling`` links to nothing), and the small refusals of its point 8.
#: ``compare`` up to the option a case gets wrong.
COMPARE = ["compare", "--model", "tiny-llama", "--tasks", "passkey", "--workload", "w", "--out", "{d}/o.json"]

HOSTILE_CASES: list[tuple[str, list[str]]] = [
    ("export: --out links to /dev/null", [*EXPORT, "--out", "{d}/null"]),
    ("export: --out links to /dev/full", [*EXPORT, "--out", "{d}/full"]),
    ("export: --out is a FIFO", [*EXPORT, "--out", "{d}/fifo"]),
    ("export: --out links to nothing", [*EXPORT, "--out", "{d}/dangling"]),
    ("export: its K/V maps path is a folder", [*EXPORT, "--out", "{d}/m.json"]),
    ("eval: --out links to /dev/null", [*EVAL, "--out", "{d}/null"]),
    ("eval: --out is a FIFO", [*EVAL, "--out", "{d}/fifo"]),
    ("bench: --out links to /dev/full", [*BENCH, "--out", "{d}/full"]),
    ("pareto: --out is a FIFO", ["pareto", "--storage", "sqlite:///{d}/ok.db", "--out", "{d}/fifo"]),
    ("study: journal links to /dev/full", [*STUDY, "--storage", "journal:{d}/full"]),
    ("study: journal links to /dev/null", [*STUDY, "--storage", "journal:{d}/null"]),
    ("study: journal is a FIFO", [*STUDY, "--storage", "journal:{d}/fifo"]),
    ("study: journal links to nothing", [*STUDY, "--storage", "journal:{d}/dangling"]),
    ("study: sqlite links to /dev/null", [*STUDY, "--storage", "sqlite:///{d}/null"]),
    ("pareto: journal is a FIFO", ["pareto", "--storage", "journal:{d}/fifo"]),
    ("study: --store-prompts without --prompts", [*STUDY, "--storage", "sqlite:///{d}/new.db", "--store-prompts"]),
    ("study: --prompts with an empty chat content", [*PROMPTS_STUDY, "--prompts", "{d}/empty-content.jsonl"]),
    ("study: --prompts with a repeated prompt", [*PROMPTS_STUDY, "--prompts", "{d}/repeated.txt"]),
    ("study: --judge references, every answer empty", [*PROMPTS_STUDY, "--prompts", "{d}/empty-answers.jsonl",
                                                      "--judge", "references"]),
    ("study: --enqueue with a junk fourth field", [*STUDY, "--storage", "sqlite:///{d}/ok.db", "--enqueue",
                                                   "3/last/0/junk"]),
    ("study: --enqueue calibrated on an own-K/V study", [*STUDY, "--storage", "sqlite:///{d}/ok.db", "--enqueue",
                                                         "4/last/0/calibrated"]),
    ("generate: --config without pop_config", [*GEN, "--config", "{d}/no-pop.json", "--prompt", "hi"]),
    ("generate: --config with pop_config null", [*GEN, "--config", "{d}/null-pop.json", "--prompt", "hi"]),
    ("generate: --config whose kv_maps lost its sha256", [*GEN, "--config", "{d}/no-sha.json", "--prompt", "hi"]),
    ("gpu-check: --out is a file", ["gpu-check", "--dry-run", "--out", "{d}/notes.txt"]),
    ("gpu-check: --out read-only", ["gpu-check", "--dry-run", "--out", "{d}/ro/check"]),
    ("gpu-check: --budget -5", ["gpu-check", "--dry-run", "--out", "{d}/check", "--budget", "-5"]),
    ("gpu-check: --budget 0", ["gpu-check", "--dry-run", "--out", "{d}/check", "--budget", "0"]),
    ("tuners: --max-drop -1", ["tuners", "--grid", "{d}/grid.csv", "--max-drop", "-1"]),
    ("grid: --timeout -1", ["grid", "--model", "tiny-llama", "--tasks", "passkey", "--out", "{d}", "--timeout", "-1"]),
]

#: Issue 87: what a folder's ``full-answers.sqlite`` is, in the folder of that name (:func:`issue_87_files`).
ANSWERS_KINDS = ("a-folder", "a-FIFO", "text", "another-database", "a-link-to-nothing")

#: (name, argv). ``{d}`` is the scratch folder.
CASES: list[tuple[str, list[str]]] = [
    ("unknown command", ["frobnicate"]),
    ("generate: unknown model", [*GEN, "--model", "no-such-model", "--skip", "1", "--prompt", "hi"]),
    ("generate: negative skip", [*GEN, "--skip", "-1", "--prompt", "hi"]),
    ("generate: skip past the layers", [*GEN, "--skip", "99", "--prompt", "hi"]),
    ("generate: empty prompt", [*GEN, "--skip", "1", "--prompt", "  "]),
    ("generate: non-UTF-8 prompt", [*GEN, "--skip", "1", "--prompt", NOT_UTF8]),
    ("generate: --config and --skip", [*GEN, "--skip", "3", "--config", "{d}/export.json", "--prompt", "hi"]),
    ("generate: missing --config", [*GEN, "--config", "{d}/none.json", "--prompt", "hi"]),
    ("generate: --config not JSON", [*GEN, "--config", "{d}/notes.txt", "--prompt", "hi"]),
    ("generate: zero new tokens", [*GEN, "--skip", "1", "--prompt", "hi", "--max-new-tokens", "0"]),
    ("generate: unknown boundary", [*GEN, "--skip", "1", "--boundary", "middle", "--prompt", "hi"]),
    ("generate: --prompt=--", [*GEN, "--skip", "1", "--prompt=--"]),
    ("generate: cuda without a GPU", [*GEN, "--skip", "1", "--prompt", "hi", "--device", "cuda:7"]),
    ("bench: lengths not integers", [*BENCH, "--lengths", "12,x"]),
    ("bench: zero length", [*BENCH, "--lengths", "0"]),
    ("bench: --lengths past the context", [*BENCH, "--lengths", "999999"]),
    ("bench: --min-seconds inf", [*BENCH, "--min-seconds", "inf"]),
    ("bench: zero repeats", [*BENCH, "--repeats", "0"]),
    ("bench: negative batch", [*BENCH, "--batch-size", "-2"]),
    ("bench: --out in a missing folder", [*BENCH, "--out", "{d}/missing/b.json"]),
    ("bench: --out is a folder", [*BENCH, "--out", "{d}"]),
    ("bench: --out in a read-only folder", [*BENCH, "--out", "{d}/ro/b.json"]),
    ("bench: --image on a text model", [*BENCH, "--lengths", "16", "--image", "64x48"]),
    ("bench: malformed --image", ["bench", "--model", "tiny-qwen3-vl", "--skip", "1", "--image", "64by48"]),
    ("eval: unknown task", [*EVAL, "--tasks", "no_such_task"]),
    ("eval: negative limit", [*EVAL, "--limit", "-3"]),
    ("eval: missing data dir", [*EVAL, "--tasks", "piqa", "--data-dir", "{d}/nodata"]),
    ("eval: --data-dir is a file", [*EVAL, "--data-dir", "{d}/notes.txt"]),
    ("eval: --out in a read-only folder", [*EVAL, "--out", "{d}/ro/e.json"]),
    ("study: negative seed", [*STUDY, "--storage", "sqlite:///{d}/new.db", "--seed", "-1"]),
    ("study: seed past 2**32", [*STUDY, "--storage", "sqlite:///{d}/new.db", "--seed", "4294967296"]),
    ("study: zero trials", [*STUDY, "--storage", "sqlite:///{d}/new.db", "--trials", "0"]),
    ("study: negative timeout", [*STUDY, "--storage", "sqlite:///{d}/new.db", "--timeout", "-1"]),
    ("study: --timeout nan", [*STUDY, "--storage", "sqlite:///{d}/new.db", "--timeout", "nan"]),
    ("study: --lengths past the context", [*STUDY, "--storage", "sqlite:///{d}/new.db", "--lengths", "999999"]),
    ("study: --max-drop inf", [*STUDY, "--storage", "sqlite:///{d}/new.db", "--max-drop", "inf"]),
    ("study: --enqueue skip past the layers", [*STUDY, "--storage", "sqlite:///{d}/ok.db", "--enqueue", "99/last/0"]),
    ("study: --enqueue malformed", [*STUDY, "--storage", "sqlite:///{d}/ok.db", "--enqueue", "last"]),
    ("study: --enqueue zero fields", [*STUDY, "--storage", "sqlite:///{d}/ok.db", "--enqueue", "0"]),
    ("study: --enqueue offset 9", [*STUDY, "--storage", "sqlite:///{d}/ok.db", "--enqueue", "2/last/9"]),
    ("study: --enqueue unknown boundary", [*STUDY, "--storage", "sqlite:///{d}/ok.db", "--enqueue", "2/xyz/0"]),
    ("study: other settings on a stored study", [*STUDY[:-2], "--repeats", "2", "--storage", "sqlite:///{d}/ok.db"]),
    ("study: storage not a URL", [*STUDY, "--storage", "{d}/ok.db"]),
    ("study: sqlite storage is a text file", [*STUDY, "--storage", "sqlite:///{d}/notes.txt"]),
    ("study: sqlite in a missing folder", [*STUDY, "--storage", "sqlite:///{d}/missing/s.db"]),
    ("study: journal on a text file", [*STUDY, "--storage", "journal:{d}/notes.txt"]),
    ("study: journal on an SQLite file", [*STUDY, "--storage", "journal:{d}/ok.db"]),
    ("study: journal is a folder", [*STUDY, "--storage", "journal:{d}"]),
    ("study: Redis URL", [*STUDY, "--storage", "redis://localhost"]),
    ("study: --study .", [*STUDY, "--storage", "sqlite:///{d}/new.db", "--study", "."]),
    ("study: --study too long for a file name", [*STUDY, "--storage", "sqlite:///{d}/new.db", "--study", "x" * 250]),
    ("study: unreachable PostgreSQL", [*STUDY, "--storage", "postgresql://u@127.0.0.1:1/x"]),
    ("study: --gpus on SQLite", [*STUDY, "--storage", "sqlite:///{d}/ok.db", "--gpus", "0"]),
    ("study: unknown baseline", [*STUDY, "--storage", "sqlite:///{d}/ok.db", "--baselines", "magic"]),
    ("study: baseline ratio 1.5", [*STUDY, "--storage", "sqlite:///{d}/ok.db", "--baselines", "sleb",
                                   "--baseline-ratios", "1.5"]),
    ("study: --image and --lengths", [*STUDY, "--storage", "sqlite:///{d}/new.db", "--image", "64x48"]),
    ("study: missing importance JSON", [*STUDY, "--storage", "sqlite:///{d}/ok.db", "--init-from-importance",
                                        "{d}/none.json"]),
    ("pareto: missing database", ["pareto", "--storage", "sqlite:///{d}/missing.db"]),
    ("pareto: missing journal", ["pareto", "--storage", "journal:{d}/missing.log"]),
    ("pareto: unknown study", ["pareto", "--storage", "sqlite:///{d}/ok.db", "--study", "nope"]),
    ("pareto: not a database", ["pareto", "--storage", "sqlite:///{d}/notes.txt"]),
    ("pareto: corrupt database", ["pareto", "--storage", "sqlite:///{d}/corrupt.db"]),
    ("pareto: sqlite URL of a folder", ["pareto", "--storage", "sqlite:///{d}"]),
    ("pareto: journal URL of a folder", ["pareto", "--storage", "journal:{d}"]),
    ("pareto: a study poptune did not write", ["pareto", "--storage", "sqlite:///{d}/foreign.db"]),
    ("pareto: MySQL URL", ["pareto", "--storage", "mysql://u@localhost/x"]),
    ("pareto: PostgreSQL host that does not resolve", ["pareto", "--storage", "postgresql://u@no-such-host.invalid/x"]),
    ("pareto: --study ..", ["pareto", "--storage", "sqlite:///{d}/ok.db", "--study", ".."]),
    ("export: missing database", ["export", "--storage", "sqlite:///{d}/missing.db", "--max-drop", "1"]),
    ("export: --out in a read-only folder", ["export", "--storage", "sqlite:///{d}/ok.db", "--max-drop", "100",
                                            "--out", "{d}/ro/c.json"]),
    ("export: --out is a folder", ["export", "--storage", "sqlite:///{d}/ok.db", "--max-drop", "100", "--out", "{d}"]),
    ("export: a study poptune did not write", ["export", "--storage", "sqlite:///{d}/foreign.db", "--study", "other",
                                               "--max-drop", "1"]),
    ("export: no completed trial", ["export", "--storage", "sqlite:///{d}/empty.db", "--max-drop", "1"]),
    ("export: --study with a slash", ["export", "--storage", "sqlite:///{d}/ok.db", "--study", "a/b", "--max-drop",
                                      "1"]),
    ("export: --max-drop inf", ["export", "--storage", "sqlite:///{d}/ok.db", "--max-drop", "inf"]),
    ("export: --max-drop nan", ["export", "--storage", "sqlite:///{d}/ok.db", "--max-drop", "nan"]),
    ("export: other model",
     ["export", "--storage", "sqlite:///{d}/ok.db", "--max-drop", "100", "--model", "tiny-qwen3"]),
    ("baseline: unknown method", ["baseline", "--model", "tiny-llama", "--method", "magic"]),
    ("baseline: ratio 2", ["baseline", "--model", "tiny-llama", "--method", "sleb", "--ratio", "2", "--tasks",
                           "passkey", "--limit", "2", "--lengths", "300"]),
    ("leaderboard: missing database", ["leaderboard", "--storage", "sqlite:///{d}/missing.db", "--out", "{d}"]),
    ("leaderboard: --out in a read-only folder", ["leaderboard", "--storage", "sqlite:///{d}/ok.db", "--out",
                                                 "{d}/ro"]),
    ("leaderboard: zero seeds", ["leaderboard", "--storage", "sqlite:///{d}/ok.db", "--out", "{d}", "--seeds", "0"]),
    ("importance: zero samples", ["importance", "--model", "tiny-llama", "--samples", "0", "--out", "{d}"]),
    ("importance: negative seed", ["importance", "--model", "tiny-llama", "--seed", "-1", "--out", "{d}"]),
    ("importance: --out read-only", ["importance", "--model", "tiny-llama", "--samples", "2", "--length", "8",
                                     "--new-tokens", "2", "--out", "{d}/ro"]),
    *HOSTILE_CASES,
    *[(f"issue-57: {name}", argv) for name, argv in (
        ("study --certify 100000", [*STUDY, "--storage", "sqlite:///{d}/new.db", "--certify", "100000"]),
        ("study --certify 1e20", [*STUDY, "--storage", "sqlite:///{d}/new.db", "--certify", "1" + "0" * 20]),
        ("study --tasks ''", [*STUDY, "--storage", "sqlite:///{d}/new.db", "--tasks", ""]),
        ("compare --skip 100000000", [*COMPARE, "--skip", "100000000"]),
        ("compare --pop twice", [*COMPARE, "--pop", "2/last/0,2/last/0"]),
        ("compare --workload ''", [*COMPARE, "--workload", ""]),
        ("compare --methods ''", [*COMPARE, "--methods", ""]),
        ("leaderboard --records: a tampered record", ["leaderboard", "--records", "{d}/records", "--out", "{d}/board"]),
        ("leaderboard --records: deep nesting", ["leaderboard", "--records", "{d}/deep-records", "--out",
                                                 "{d}/board"]),
        ("generate --config: deep nesting", ["generate", "--model", "tiny-llama", "--config", "{d}/deep.json",
                                             "--prompt", "hi"]),
        ("generate --config: other weights", ["generate", "--model", "tiny-llama", "--config",
                                              "{d}/other-weights.json", "--prompt", "hi"]),
        ("study --init-from-importance: deep nesting", [*STUDY, "--storage", "sqlite:///{d}/new.db",
                                                       "--init-from-importance", "{d}/deep.json"]),
        ("study --init-from-importance: 12 layers", [*STUDY, "--storage", "sqlite:///{d}/new.db",
                                                    "--init-from-importance", "{d}/importance-12.json"]),
    )],
    *[(f"issue-87: {name}", argv) for name, argv in (
        ("generate --prompt past the context", [*GEN, "--skip", "1", "--prompt", "x" * 100_000]),
        ("generate --config: a 5000-digit integer", [*GEN, "--config", "{d}/huge-int.json", "--prompt", "hi"]),
        ("generate --config: a key twice", [*GEN, "--config", "{d}/key-twice.json", "--prompt", "hi"]),
        ("study --init-from-importance: a 5000-digit integer", [*STUDY, "--storage", "sqlite:///{d}/new.db",
                                                               "--init-from-importance", "{d}/huge-int.json"]),
        ("study --prompts: a 5000-digit integer", [*PROMPTS_STUDY, "--prompts", "{d}/huge-int.jsonl"]),
        ("study --prompts: deep nesting", [*PROMPTS_STUDY, "--prompts", "{d}/deep.jsonl"]),
        ("study --storage sqlite:///:memory:", [*STUDY, "--storage", "sqlite:///:memory:"]),
        ("study --storage ?mode=ro", [*STUDY, "--storage", "sqlite:///{d}/ok.db?mode=ro"]),
        ("study --time-budget 1e308", [*STUDY, "--storage", "sqlite:///{d}/new.db", "--time-budget", "1e308"]),
        ("study --time-budget 0.001", [*STUDY, "--storage", "sqlite:///{d}/new.db", "--time-budget", "0.001"]),
        ("study --lengths 300,300", [*STUDY[:-2], "--lengths", "300,300", "--storage", "sqlite:///{d}/new.db"]),
        ("bench --lengths 16,16", [*BENCH, "--lengths", "16,16"]),
        ("pareto --out ''", ["pareto", "--storage", "sqlite:///{d}/ok.db", "--out", ""]),
        ("leaderboard --out ''", ["leaderboard", "--storage", "sqlite:///{d}/ok.db", "--out", ""]),
        ("study --study with a line break", [*STUDY, "--storage", "sqlite:///{d}/new.db", "--study", "a\nb"]),
        # the rest of points 4, 5 and 7
        ("pareto: a trial without config", ["pareto", "--storage", "sqlite:///{d}/no-config.db"]),
        ("export: a trial without config", ["export", "--storage", "sqlite:///{d}/no-config.db", "--max-drop",
                                            "100"]),
        ("pareto: speedup 'fast'", ["pareto", "--storage", "sqlite:///{d}/speedup-fast.db"]),
        ("export: latency NaN", ["export", "--storage", "sqlite:///{d}/latency-nan.db", "--max-drop",
                                 "100"]),
        ("leaderboard: speedup 'fast'", ["leaderboard", "--storage", "sqlite:///{d}/speedup-fast.db", "--out",
                                         "{d}/board"]),
        ("export: a tampered skip=99", ["export", "--storage", "sqlite:///{d}/skip-99.db", "--max-drop",
                                        "100"]),
        ("study --max-pairs 2", [*STUDY, "--storage", "sqlite:///{d}/new.db", "--max-pairs", "2"]),
        ("bench --max-pairs 2", [*BENCH, "--max-pairs", "2"]),
        ("generate --config without a weights fingerprint", [*GEN, "--config", "{d}/no-fingerprint.json",
                                                             "--prompt", "hi"]),
        ("generate --config with a null weights fingerprint", [*GEN, "--config", "{d}/null-fingerprint.json",
                                                               "--prompt", "hi"]),
        ("study --enqueue 20 digits on a complete study", [*STUDY, "--trials", "1", "--storage",
                                                           "sqlite:///{d}/ok.db", "--enqueue",
                                                           "99999999999999999999/last/0"]),
        ("leaderboard --records: num_layers 0", ["leaderboard", "--records", "{d}/records-0", "--out", "{d}/board"]),
        ("leaderboard --records: items and outcomes differ", ["leaderboard", "--records", "{d}/records-items",
                                                             "--out", "{d}/board"]),
        *[(f"study: full-answers.sqlite is {kind}", [*STUDY, "--storage", f"sqlite:///{{d}}/{kind}/new.db"])
          for kind in ANSWERS_KINDS],
        ("pareto: a journal record with op_code 99", ["pareto", "--storage", "journal:{d}/op-99.log"]),
        ("pareto: a journal record without worker_id", ["pareto", "--storage", "journal:{d}/no-worker.log"]),
        ("compare: its default --pop on 6 layers", COMPARE),
        ("study --items 0", [*STUDY, "--storage", "sqlite:///{d}/new.db", "--items", "0"]),
        ("tuners --grid .", ["tuners", "--grid", "{d}", "--max-drop", "1"]),
    )],
]


def _snapshot(folder: Path) -> dict[str, tuple[int, int, str]]:
    files = {}
    for path in sorted(folder.rglob("*")):
        if path.is_dir() and not path.is_symlink():  # a folder made (grid's raw/) is a touch too
            files[str(path.relative_to(folder)) + "/"] = (0, 0, "folder")
        elif path.is_symlink() or not path.is_file():  # links, the FIFO: their kind, never their content
            files[str(path.relative_to(folder))] = (0, 0, f"{os.lstat(path).st_mode:o}->"
                                                          f"{os.readlink(path) if path.is_symlink() else ''}")
        else:
            files[str(path.relative_to(folder))] = (path.stat().st_size, path.stat().st_mtime_ns,
                                                    hashlib.sha256(path.read_bytes()).hexdigest())
    return files


def _touched(before: dict, after: dict) -> list[str]:
    names = sorted(set(before) | set(after))
    return [f"{n} ({'new' if n not in before else 'removed' if n not in after else 'changed'})"
            for n in names if before.get(n) != after.get(n)]


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", CUDA_VISIBLE_DEVICES="")
    env.pop("POPTUNE_DATA", None)
    return env


def _poptune(argv: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "poptune", *argv], cwd=cwd, env=_env(), capture_output=True,
                          text=True, errors="replace", timeout=timeout)


def make_scratch(folder: Path) -> None:
    """The files every case may touch: a stored study, an export, text, a corrupt database, a read-only folder."""
    done = _poptune([*STUDY, "--trials", "1", "--storage", f"sqlite:///{folder}/ok.db"], folder)
    if done.returncode:
        raise SystemExit(f"could not make the scratch study: {done.stderr[-2000:]}")
    _poptune(["export", "--storage", f"sqlite:///{folder}/ok.db", "--max-drop", "100", "--out",
              f"{folder}/export.json"], folder)
    made = subprocess.run([sys.executable, "-c", OTHER_STUDIES, str(folder)], env=_env(), capture_output=True,
                          text=True)
    if made.returncode:
        raise SystemExit(f"could not make the other studies: {made.stderr[-2000:]}")
    (folder / "notes.txt").write_text("my notes, not a journal\n")
    (folder / "corrupt.db").write_bytes(b"SQLite format 3\x00" + os.urandom(4096))
    for stray in folder.glob("*.png"):
        stray.unlink()
    hostile_files(folder)
    issue_87_files(folder)
    read_only_folder(folder / "ro")


def hostile_files(folder: Path) -> None:
    """What :data:`HOSTILE_CASES` point at: a FIFO, links to devices and to nothing, a folder where an export's
    maps go, malformed prompts files and exported configurations."""
    import json

    os.mkfifo(folder / "fifo")
    (folder / "null").symlink_to("/dev/null")
    (folder / "full").symlink_to("/dev/full")
    (folder / "dangling").symlink_to(folder / "missing" / "x")
    (folder / "m.kv.safetensors").mkdir()
    (folder / "empty-content.jsonl").write_text(json.dumps({"messages": [{"role": "user", "content": ""}]}) + "\n")
    (folder / "repeated.txt").write_text("What is two plus two?\nName a colour.\nWhat is two plus two?\n")
    (folder / "empty-answers.jsonl").write_text("".join(json.dumps({"prompt": f"Question {i}?", "answer": ""}) + "\n"
                                                        for i in range(3)))
    config = json.loads((folder / "export.json").read_text())
    (folder / "no-pop.json").write_text(json.dumps({k: v for k, v in config.items() if k != "pop_config"}))
    (folder / "null-pop.json").write_text(json.dumps(dict(config, pop_config=None)))
    (folder / "other-weights.json").write_text(json.dumps(dict(config, model=dict(
        config["model"], weights_fingerprint="random-seed0-config-0000000000000000"))))
    (folder / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (folder / "huge-int.json").write_text('{"format": "poptune-config/1", "num_layers": ' + "1" * 5000 + "}")
    (folder / "key-twice.json").write_text(json.dumps(config)[:-1] + ', "model": ' + json.dumps(config["model"]) + "}")
    (folder / "huge-int.jsonl").write_text('{"prompt": "hi", "max_tokens": ' + "1" * 5000 + "}\n")
    (folder / "deep.jsonl").write_text('{"messages": ' + "[" * 50_000 + "]" * 50_000 + "}\n")
    for name, text in (("records", json.dumps({"record": "poptune-methods", "version": 1, "profiles": 3})),
                       ("deep-records", "[" * 100_000 + "]" * 100_000)):
        (folder / name).mkdir()
        (folder / name / "methods-x.json").write_text(text)
    layers = [1.0] * 12
    (folder / "importance-12.json").write_text(json.dumps({
        "format": "poptune-importance/1", "model": "tiny-llama", "num_layers": 12,
        "prefill": {"raw": layers}, "decode": {"raw": layers}, "seconds": 1.0, "dtype": "float32", "device": "cpu",
        "calibration": {"samples": 4, "prompt_tokens": 16, "new_tokens": 4, "source": "generated", "loss": 3.0}}))
    (folder / "no-sha.json").write_text(json.dumps(dict(config, pop_config=dict(config["pop_config"], kv="calibrated"),
                                                        kv_maps={"file": "m.kv.safetensors"})))


def _tampered(source: Path, target: Path, key: str, value: str | None) -> None:
    """A copy of the study database ``source`` whose first trial's attribute ``key`` holds the JSON ``value``
    (None: removed), as another tool would leave it."""
    import sqlite3

    shutil.copyfile(source, target)
    with sqlite3.connect(target) as db:
        if value is None:
            db.execute("DELETE FROM trial_user_attributes WHERE trial_id = 1 AND key = ?", (key,))
        else:
            db.execute("UPDATE trial_user_attributes SET value_json = ? WHERE trial_id = 1 AND key = ?", (value, key))
    db.close()


def issue_87_files(folder: Path) -> None:
    """What the rest of issue 87's rows point at: tampered trials, exports without a weights fingerprint, compare
    records whose counts disagree, broken answers files beside a storage, corrupt journal records."""
    import json
    import sqlite3

    for name, key, value in (("no-config", "config", None), ("speedup-fast", "speedup", '"fast"'),
                             ("latency-nan", "latency", "NaN"),
                             ("skip-99", "config", '{"skip": 99, "boundary": "last", "offset": 0}')):
        _tampered(folder / "ok.db", folder / f"{name}.db", key, value)
    config = json.loads((folder / "export.json").read_text())
    (folder / "no-fingerprint.json").write_text(json.dumps(dict(config, model={"name": config["model"]["name"]})))
    (folder / "null-fingerprint.json").write_text(json.dumps(dict(config, model=dict(config["model"],
                                                                                     weights_fingerprint=None))))
    record = json.loads((ROOT / "leaderboards" / "raw" /
                         "methods-long-prompts-gemma-3-270m-cpu-intel-xeon-processor-2t.json").read_text())
    first = record["methods"][0]
    for name, changed in (("records-0", dict(record, num_layers=0)),
                          ("records-items", dict(record, methods=[dict(first, items={
                              t: v[:-1] for t, v in first["items"].items()}), *record["methods"][1:]]))):
        (folder / name).mkdir()
        (folder / name / "methods-x.json").write_text(json.dumps(changed))
    (folder / "board").mkdir()
    for kind in ANSWERS_KINDS:
        (folder / kind).mkdir()
        path = folder / kind / "full-answers.sqlite"
        if kind == "a-folder":
            path.mkdir()
        elif kind == "a-FIFO":
            os.mkfifo(path)
        elif kind == "text":
            path.write_text("my notes\n")
        elif kind == "another-database":
            with sqlite3.connect(path) as db:
                db.execute("CREATE TABLE mine (x)")
            db.close()
        else:
            path.symlink_to(folder / "missing" / "x")
    journal = (ROOT / "tests" / "reports" / "golden" / "fake-study.journal").read_bytes().splitlines(keepends=True)
    record3 = json.loads(journal[2])
    for name, line in (("op-99", dict(record3, op_code=99)),
                       ("no-worker", {k: v for k, v in record3.items() if k != "worker_id"})):
        (folder / f"{name}.log").write_bytes(b"".join([*journal[:2], json.dumps(line).encode() + b"\n",
                                                       *journal[3:]]))


def read_only_folder(path: Path) -> None:
    """A folder no file can be created in: a read-only tmpfs as root (root ignores permission bits), else 0o500."""
    path.mkdir()
    if os.geteuid() == 0 and shutil.which("mount"):
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(path)]).returncode == 0:
            return
    path.chmod(stat.S_IRUSR | stat.S_IXUSR)


def release_folder(path: Path) -> None:
    if os.path.ismount(path):
        subprocess.run(["umount", str(path)])
    elif path.exists():
        path.chmod(stat.S_IRWXU)


def run_cases(folder: Path, selected: list[tuple[str, list[str]]]) -> list[tuple[str, int, str, list[str], float]]:
    rows = []
    for name, argv in selected:
        argv = [a.replace("{d}", str(folder)) for a in argv]
        before = _snapshot(folder)
        started = time.monotonic()
        done = _poptune(argv, folder)
        seconds = time.monotonic() - started
        first = (done.stderr.strip().splitlines() or [""])[0]
        rows.append((name, done.returncode, first.replace(str(folder), "D"), _touched(before, _snapshot(folder)),
                     seconds))
        print(f"{name}: {done.returncode} in {seconds:.1f} s", file=sys.stderr)
    return rows


def table(rows: list[tuple[str, int, str, list[str], float]]) -> str:
    lines = ["| case | exit | first stderr line | files touched | s |", "|---|---|---|---|---|"]
    for name, code, first, touched, seconds in rows:
        text = first[:140].replace("|", "\\|")
        lines.append(f"| {name} | {code} | `{text}` | {', '.join(touched) or 'none'} | {seconds:.1f} |")
    ok = sum(code == 2 and not touched for _, code, _, touched, _ in rows)
    lines.append(f"\n{ok} of {len(rows)} cases: exit 2, nothing touched.")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", default="", help="only cases whose name holds this text")
    args = parser.parse_args()
    selected = [c for c in CASES if args.k in c[0] or (args.k == "issue-49" and c in HOSTILE_CASES)]
    folder = Path(tempfile.mkdtemp(prefix="poptune-bad-"))
    try:
        make_scratch(folder)
        print(table(run_cases(folder, selected)))
        broken = [d for d in ("/dev/null", "/dev/full") if os.path.exists(d) and not stat.S_ISCHR(os.stat(d).st_mode)]
        state = f"{', '.join(broken)} NOT character devices" if broken else "/dev/null and /dev/full still devices"
        print(f"\nAfter the cases: {state}.")
    finally:
        release_folder(folder / "ro")
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
