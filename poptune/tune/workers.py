"""Worker processes on one multi-GPU host: one ``poptune study`` per GPU, all sharing one study.

``poptune study --gpus 0,1,2,3 --storage URL`` starts one worker process per GPU, each pinned to its GPU with
``CUDA_VISIBLE_DEVICES`` (so each sees one device, ``cuda``), all on the same storage and the same budget of
completed trials. A worker killed by a signal (the OOM killer, a preempted node, ``kill -9``) is started again,
a few times: its trial goes stale and is retried (see :mod:`poptune.tune.study`). A worker that exits with an error
is not restarted.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from poptune.errors import ConfigError, DeviceError

if TYPE_CHECKING:
    import optuna

__all__ = ["MAX_RESTARTS", "WorkerCommand", "parse_gpus", "check_gpus", "study_budgets", "supervise"]

#: Restarts per GPU of a worker killed by a signal.
MAX_RESTARTS = 3


@dataclass(frozen=True)
class WorkerCommand:
    """One worker: its command line and its GPU (``CUDA_VISIBLE_DEVICES``)."""

    argv: tuple[str, ...]
    gpu: int

    def env(self) -> dict[str, str]:
        return {**os.environ, "CUDA_VISIBLE_DEVICES": str(self.gpu)}


def parse_gpus(text: str) -> list[int]:
    """``"0,1,2,3"`` -> ``[0, 1, 2, 3]``: distinct GPU indices, or a one-line ConfigError."""
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or any(not p.isdigit() for p in parts):
        raise ConfigError(f"`--gpus` must be comma-separated GPU indices such as 0,1,2,3, got {text!r}")
    gpus = [int(p) for p in parts]
    if len(set(gpus)) != len(gpus):
        raise ConfigError(f"`--gpus` names a GPU twice: {text!r}")
    return gpus


def study_budgets(storage: "optuna.storages.BaseStorage", gpus: Sequence[int], *, model: str, study: str | None,
                  trials: int, add: int | None) -> tuple[dict[int, str], dict[str, int]]:
    """The study each GPU works on and each study's budget of completed trials.

    Without ``study``, each GPU joins ``<model>@<hardware-id>`` of its kind (one study per GPU kind); each study
    is run to ``trials``, or with ``add``, to what it holds already plus ``add``.
    """
    from poptune import store
    from poptune.measure.hardware import fingerprint
    from poptune.models import resolve_model

    name = resolve_model(model).name
    names = {g: study or store.study_name(name, fingerprint(f"cuda:{g}").hardware_id) for g in gpus}
    stored = store.study_names(storage)
    budgets: dict[str, int] = {}
    for each in set(names.values()):
        done = len(store.completed(store.load_study(storage, each))) if each in stored else 0
        budgets[each] = done + add if add is not None else trials
    return names, budgets


def check_gpus(gpus: Sequence[int]) -> None:
    """Refuse GPUs this machine does not have (all of them, on a machine without CUDA)."""
    import torch

    if not torch.cuda.is_available():
        raise DeviceError("`--gpus` starts one worker per CUDA GPU, and CUDA is not available on this machine")
    count = torch.cuda.device_count()
    missing = [g for g in gpus if g >= count]
    if missing:
        raise DeviceError(f"`--gpus` names GPU(s) {missing}, but this machine has {count} CUDA device(s)")


def supervise(workers: Sequence[WorkerCommand], *, max_restarts: int = MAX_RESTARTS, poll_s: float = 0.2) -> int:
    """Run ``workers`` side by side until all have ended; restart one killed by a signal.

    Returns:
        0 if every worker ended with 0, else the first non-zero exit code (a signal as 128 + its number).
    """
    procs = {i: _start(w) for i, w in enumerate(workers)}
    restarts = dict.fromkeys(procs, 0)
    codes: dict[int, int] = {}
    try:
        while procs:
            for i, proc in list(procs.items()):
                code = proc.poll()
                if code is None:
                    continue
                del procs[i]
                if code < 0 and restarts[i] < max_restarts:
                    restarts[i] += 1
                    print(f"poptune: worker on GPU {workers[i].gpu} was killed (signal {-code}); "
                          f"restarting it ({restarts[i]}/{max_restarts})", file=sys.stderr)
                    procs[i] = _start(workers[i])
                else:
                    codes[i] = code if code >= 0 else 128 - code
            time.sleep(poll_s)
    finally:
        for proc in procs.values():  # interrupted: take the workers down with us
            proc.terminate()
        for proc in procs.values():
            proc.wait()
    return next((codes[i] for i in sorted(codes) if codes[i]), 0)


def _start(worker: WorkerCommand) -> subprocess.Popen:
    return subprocess.Popen(list(worker.argv), env=worker.env())
