"""Provenance of a measurement: what ran it, on which weights, under which threads and load.

Recorded in every bench JSON and every study: the versions of poptune (from the installed package's metadata),
torch, transformers and Python (:func:`versions`), the command line, the git commit (when the package sits in
a git checkout), the weights' source and fingerprint, the attention implementation, dtype, torch's thread
counts, the OpenMP/MKL variables, and the load average when the work started and ended (a load well above the
cores means other work shared the machine, whatever the intervals say).

Every result poptune writes says what made it, on which hardware, with which versions and when, through one
record: :class:`Provenance`. A writer builds it (:meth:`Provenance.here` for this run, :meth:`Provenance.from_dict`
for a stored record) and renders it -- :meth:`~Provenance.to_dict` for a JSON record, :meth:`~Provenance.lines`
for the ``## Provenance`` section of a Markdown file (the leaderboards, the tuner table),
:meth:`~Provenance.sentence` where a file says it in a sentence (the grid's README, the methods board) -- and
:func:`now` dates every record. Its command is always as a user types it (:func:`typed_command`): no path of the
machine it ran on.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from poptune.device import dtype_of
from poptune.files import typed_path

__all__ = ["THREAD_VARIABLES", "Provenance", "as_typed", "git_commit", "load_average", "now", "poptune_version",
           "provenance", "typed_command", "versions"]

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
    measured) are not local changes of the code that measures. ``root``: another checkout (for tests). Git's state
    is read without writing into the checkout: ``git status`` otherwise refreshes the index and takes its lock
    (``.git/index.lock``), a write into the install tree that a read-only or shared checkout refuses (issue 87)."""
    root = root or Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None

    def run(*cmd: str) -> str:
        return subprocess.run(["git", "--no-optional-locks", "-C", str(root), *cmd], capture_output=True, text=True,
                              timeout=10, check=True, env=dict(os.environ, GIT_OPTIONAL_LOCKS="0")).stdout.strip()

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
    """What produced a measurement on ``model`` (a loaded model), a run's record: the :class:`Provenance` of this
    run with the threads, the attention, the dtype and the load beside it; ``load_end`` is filled by the caller.

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
    record = Provenance.here(model=model_name, weights_fingerprint=fingerprint, commit=True)
    return {
        "command": as_typed(sys.argv),  # the words, as typed (Provenance.from_dict reads them)
        "poptune": (record.versions or {}).get("poptune"),
        "git_commit": record.commit,
        "model": record.model,
        "weights": weights,
        "weights_fingerprint": record.weights_fingerprint,
        "attn_implementation": getattr(config, "_attn_implementation", None),
        "dtype": dtype_of(model),
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "thread_env": {name: os.environ.get(name) for name in THREAD_VARIABLES},
        "load_start": load_average(),
        "load_end": None,
    }


def as_typed(argv: Sequence[str], *, cwd: str | Path | None = None) -> list[str]:
    """A command line as a user types it, with no path of the machine it ran on: the program as ``poptune`` (the
    console script or ``poptune/__main__.py``) or relative to the working directory (``benchmarks/x.py``), and each
    absolute path argument (``--out /root/out/x``, ``--out=/root/out/x`` and a storage URL's path,
    ``journal:/root/s.journal`` or ``sqlite:////root/s.db``, alike) as :func:`typed_path` writes it; other
    arguments unchanged.

    Example: ``['/work/main/poptune/__main__.py', 'gpu-check', '--out', '/root/out/gpu-check']`` with ``OUT=/root/out``
    -> ``['poptune', 'gpu-check', '--out', '$OUT/gpu-check']``.
    """
    def value(text: str) -> str:
        for scheme in ("journal:", "sqlite:///"):  # a storage URL's file
            if text.startswith(scheme + "/"):
                return scheme + typed_path(text[len(scheme):], cwd=cwd)
        return typed_path(text, cwd=cwd)

    def arg(text: str) -> str:
        flag, eq, rest = text.partition("=")
        return f"{flag}={value(rest)}" if eq and flag.startswith("--") else value(text)

    if not argv:
        return []
    program = Path(argv[0])
    if program.name == "poptune" or (program.name == "__main__.py" and program.parent.name == "poptune"):
        head = "poptune"
    else:
        head = typed_path(argv[0], cwd=cwd)
    return [head, *(arg(a) for a in argv[1:])]


def typed_command(argv: Sequence[str], *, program: str | None = "poptune", cwd: str | Path | None = None) -> str:
    """A command line in one string as a user types it (:func:`as_typed`: no path of the machine), quoted as a
    shell reads it: ``argv`` the arguments of ``program`` (``poptune study --model x``), or with ``program`` None
    a whole command line whose first word is the program (``sys.argv``): ``poptune ...`` for poptune, ``python
    benchmarks/x.py ...`` for a script, ``python ?`` for an empty one."""
    words = as_typed([program, *argv] if program is not None else argv, cwd=cwd)
    if not words:
        return "python ?"
    return " ".join(map(_quoted, words if words[0] == "poptune" else ["python", *words]))


#: What :func:`as_typed` puts in a path's place: shown as they are, never quoted (``--out $OUT/x``, not
#: ``--out '$OUT/x'``).
_PLACEHOLDERS = ("$OUT", "<tmp>", "<dir>", "~")


def _quoted(word: str) -> str:
    """``word`` quoted as a shell reads it (:func:`shlex.quote`), its placeholders left bare."""
    plain = word
    for mark in _PLACEHOLDERS:
        plain = plain.replace(mark, "x")
    return word if shlex.quote(plain) == plain else shlex.quote(word)


def now() -> str:
    """The time now, UTC, ISO 8601 to the second: how every record is dated."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Provenance:
    """What made a result: the one record every writer builds and renders (JSON, Markdown or a sentence).

    Attributes:
        command: The command line as a user types it (:func:`typed_command`: no path of the machine).
        hardware: The hardware it ran on (a :class:`~poptune.measure.hardware.HardwareRecord` as a dict; a
            record that kept only its id: ``{"hardware_id": ...}``).
        versions: The versions by name (:func:`versions`).
        date: When (:func:`now`).
        model: The model measured (its poptune name).
        weights_fingerprint: Its weights' fingerprint (:func:`poptune.models.weights_fingerprint`).
        commit: The git commit of the code that made it (:func:`git_commit`).
    """

    command: str | None = None
    hardware: Mapping[str, Any] | None = None
    versions: Mapping[str, Any] | None = None
    date: str | None = None
    model: str | None = None
    weights_fingerprint: str | None = None
    commit: str | None = None

    @classmethod
    def here(cls, *, command: str | None = None, hardware: Mapping[str, Any] | None = None,
             model: str | None = None, weights_fingerprint: str | None = None, commit: bool = False) -> Provenance:
        """This run's record: ``command`` (typed already, :func:`typed_command`), the :func:`versions` running now,
        dated :func:`now`, with the :func:`git_commit` when ``commit``."""
        return cls(command=command, hardware=dict(hardware) if hardware is not None else None, versions=versions(),
                   date=now(), model=model, weights_fingerprint=weights_fingerprint,
                   commit=git_commit() if commit else None)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Provenance:
        """The record of a stored result: :meth:`to_dict`'s keys, or a run's (``command`` as a list of words, as
        recorded by :func:`provenance`; ``git_commit``), or an importance result's (``hardware_id`` alone)."""
        command = data.get("command")
        if isinstance(command, (list, tuple)):
            command = typed_command([str(word) for word in command], program=None)
        hardware = data.get("hardware")
        if hardware is None and data.get("hardware_id") is not None:
            hardware = {"hardware_id": data["hardware_id"]}
        return cls(command=command, hardware=dict(hardware) if isinstance(hardware, Mapping) else None,
                   versions=dict(data["versions"]) if isinstance(data.get("versions"), Mapping) else None,
                   date=data.get("date"), model=data.get("model") if isinstance(data.get("model"), str) else None,
                   weights_fingerprint=data.get("weights_fingerprint"), commit=data.get("git_commit"))

    def to_dict(self) -> dict[str, Any]:
        """The JSON record: ``command``, ``hardware``, ``versions`` and ``date`` always; ``model``,
        ``weights_fingerprint`` and ``git_commit`` where known."""
        data: dict[str, Any] = {"command": self.command,
                                "hardware": dict(self.hardware) if self.hardware is not None else None,
                                "versions": dict(self.versions) if self.versions is not None else None,
                                "date": self.date}
        extra = {"model": self.model, "weights_fingerprint": self.weights_fingerprint, "git_commit": self.commit}
        return data | {k: v for k, v in extra.items() if v is not None}

    @property
    def hardware_id(self) -> str | None:
        return self.hardware.get("hardware_id") if self.hardware is not None else None

    def hardware_text(self) -> str:
        """The hardware in words: ``<hardware id> (<device name, else CPU, else kind>)``."""
        hardware = self.hardware or {}
        name = hardware.get("name") or hardware.get("cpu") or hardware.get("kind", "")
        return f"{hardware.get('hardware_id', '?')} ({name})".replace(" ()", "")

    def versions_text(self) -> str:
        """The versions in words, by name: ``poptune 0.1.0, python 3.11.7, torch 2.13.0, ...``."""
        return ", ".join(f"{k} {v}" for k, v in sorted((self.versions or {}).items()))

    def sentence(self) -> str:
        """Hardware and versions in a sentence: ``hardware <hardware text>; <versions text>``."""
        return f"hardware {self.hardware_text()}; {self.versions_text()}"

    def lines(self, details: Sequence[str] = (), *, date_note: str = "") -> list[str]:
        """The ``## Provenance`` section of a Markdown result: the command that wrote it, what it was made from
        (``details``, one bullet each), the hardware, the versions and the date (with ``date_note`` after it),
        each where known."""
        lines = ["## Provenance", "", f"- command: `{(self.command or 'not recorded').strip()}`",
                 *(f"- {d}" for d in details)]
        if self.hardware is not None:
            lines.append(f"- hardware: {self.hardware_text()}")
        if self.versions is not None:
            lines.append(f"- versions: {self.versions_text()}")
        if self.date is not None:
            lines.append(f"- date: {self.date}{date_note}")
        return lines + [""]
