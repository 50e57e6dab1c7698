"""Provenance of a measurement: what ran it, on which weights, under which threads and load.

Recorded in every bench JSON and every study: the versions of poptune (from the installed package's metadata),
torch, transformers and Python (:func:`versions`), the command line, the git commit (when the package sits in
a git checkout), the weights' source and fingerprint, the attention implementation, dtype, torch's thread
counts, the OpenMP/MKL variables, and the load average when the work started and ended (a load well above the
cores means other work shared the machine, whatever the intervals say).

Every result poptune writes says what made it, on which hardware, with which versions and when, through the one
writer here: :func:`stamp` for a JSON record, :func:`provenance_block` for the ``## Provenance`` section of a
Markdown file (the leaderboards, the tuner table), :func:`hardware_text` and :func:`versions_text` where a file
says them in a sentence (the grid's README, the methods board), and :func:`now` for every date.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["THREAD_VARIABLES", "as_typed", "git_commit", "hardware_text", "load_average", "now", "poptune_version",
           "provenance", "provenance_block", "stamp", "versions", "versions_text"]

#: Environment variables that set how many threads the math libraries use.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "KMP_AFFINITY", "OMP_PROC_BIND")


def poptune_version() -> str:
    """The installed poptune distribution's version (package metadata), or ``unknown`` where it is not installed."""
    from poptune.version import installed_version

    return installed_version()


def versions() -> dict[str, str]:
    """Versions of what produced a measurement, for provenance."""
    import torch
    import transformers

    return {
        "poptune": poptune_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
    }


def git_commit(root: Path | None = None) -> str | None:
    """The commit of the checkout poptune is imported from (``+dirty`` with local changes), or None.

    Changes to measured outputs (``leaderboards/``, ``studies/``: a grid's committed journal grows while it is
    measured) are not local changes of the code that measures. ``root``: another checkout (for tests)."""
    root = root or Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None

    def run(*cmd: str) -> str:
        return subprocess.run(["git", "-C", str(root), *cmd], capture_output=True, text=True, timeout=10,
                              check=True).stdout.strip()

    try:
        commit = run("rev-parse", "HEAD")
        dirty = bool(run("status", "--porcelain", "--untracked-files=no", "--", ".", ":!leaderboards", ":!studies"))
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("+dirty" if dirty else "")


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages, or None where the system has none."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def provenance(model: Any, *, model_name: str, weights: str | None = None) -> dict[str, Any]:
    """What produced a measurement on ``model`` (a loaded model); ``load_end`` is filled by the caller.

    Args:
        model: The loaded model (its attention implementation and dtype are read).
        model_name: The poptune name it was loaded by.
        weights: ``pretrained`` or ``random`` as given to :func:`poptune.load_model` (None: unknown).
    """
    import torch

    config = getattr(model, "config", None)
    fingerprint = None
    if weights is not None:
        from poptune.models import weights_fingerprint

        try:
            fingerprint = weights_fingerprint(model_name, weights)
        except Exception as e:  # noqa: BLE001 -- a model loaded from elsewhere: say why there is none
            fingerprint = f"unknown ({type(e).__name__})"
    return {
        "command": as_typed(sys.argv),
        "poptune": poptune_version(),
        "git_commit": git_commit(),
        "model": model_name,
        "weights": weights,
        "weights_fingerprint": fingerprint,
        "attn_implementation": getattr(config, "_attn_implementation", None),
        "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "thread_env": {name: os.environ.get(name) for name in THREAD_VARIABLES},
        "load_start": load_average(),
        "load_end": None,
    }


def as_typed(argv: Sequence[str], *, cwd: str | Path | None = None) -> list[str]:
    """A command line as a user types it, with no path of the machine it ran on: the program as ``poptune`` (the
    console script or ``poptune/__main__.py``) or relative to the working directory (``benchmarks/x.py``), and each
    absolute path argument (``--out /root/out/x`` and ``--out=/root/out/x`` alike) under ``$OUT`` as ``$OUT/...``,
    under the working directory or its parent as a relative path (``../shared/data``), under the home directory as
    ``~/...``; other arguments unchanged.

    Example: ``['/work/main/poptune/__main__.py', 'gpu-check', '--out', '/root/out/gpu-check']`` with ``OUT=/root/out``
    -> ``['poptune', 'gpu-check', '--out', '$OUT/gpu-check']``.
    """
    here = Path(cwd) if cwd is not None else Path.cwd()
    out = os.environ.get("OUT")

    def path(text: str) -> str:
        if not text.startswith("/"):
            return text
        p = Path(text)
        if out and out.startswith("/") and p.is_relative_to(out):
            return "$OUT" + text[len(out.rstrip("/")):]
        for base, prefix in ((here, ""), (here.parent, "../")):
            if p.is_relative_to(base) and base != Path("/"):
                return prefix + (p.relative_to(base).as_posix() if p != base else ".")
        home = Path.home()
        if home != Path("/") and p.is_relative_to(home):
            return "~/" + p.relative_to(home).as_posix()
        return text

    def arg(text: str) -> str:
        flag, eq, value = text.partition("=")
        return f"{flag}={path(value)}" if eq and flag.startswith("--") else path(text)

    if not argv:
        return []
    program = Path(argv[0])
    if program.name == "poptune" or (program.name == "__main__.py" and program.parent.name == "poptune"):
        head = "poptune"
    else:
        head = path(argv[0])
    return [head, *(arg(a) for a in argv[1:])]


def now() -> str:
    """The time now, UTC, ISO 8601 to the second: how every record is dated."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def stamp(hardware: Mapping[str, Any] | None, *, command: str | None = None, date: str | None = None
          ) -> dict[str, Any]:
    """The provenance block of a JSON record: the ``command`` that made it, the ``hardware`` it ran on (a
    :class:`~poptune.measure.hardware.HardwareRecord` as a dict), the :func:`versions` running now and the
    ``date`` (default: :func:`now`)."""
    return {"command": command, "hardware": dict(hardware) if hardware is not None else None,
            "versions": versions(), "date": date or now()}


def hardware_text(hardware: Mapping[str, Any]) -> str:
    """A hardware record in words: ``<hardware id> (<device name, else CPU, else kind>)``."""
    name = hardware.get("name") or hardware.get("cpu") or hardware.get("kind", "")
    return f"{hardware.get('hardware_id', '?')} ({name})".replace(" ()", "")


def versions_text(versions: Mapping[str, Any]) -> str:
    """Versions in words, by name: ``poptune 0.1.0, python 3.11.7, torch 2.13.0, ...``."""
    return ", ".join(f"{k} {v}" for k, v in sorted(versions.items()))


def provenance_block(command: str, *, hardware: Mapping[str, Any] | None = None,
                     versions: Mapping[str, Any] | None = None, date: str | None = None,
                     details: Sequence[str] = ()) -> list[str]:
    """The ``## Provenance`` section of a Markdown result: the command that wrote it, what it was made from
    (``details``, one bullet each), the hardware, the versions and the date, each where given."""
    lines = ["## Provenance", "", f"- command: `{command.strip()}`", *(f"- {d}" for d in details)]
    if hardware is not None:
        lines.append(f"- hardware: {hardware_text(hardware)}")
    if versions is not None:
        lines.append(f"- versions: {versions_text(versions)}")
    if date is not None:
        lines.append(f"- date: {date}")
    return lines + [""]
