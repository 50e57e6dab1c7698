"""Several `poptune study` workers on one shared study, with faults: do they fill it exactly, once each?

Starts N worker processes (`poptune study --max-trials T`) on one storage -- a PostgreSQL database (a throwaway
local server unless --url is given) or a journal file -- optionally kills one worker with SIGKILL (and starts it
again, as a scheduler would) or restarts the database server, every few seconds or each time the study has a few
more configurations measured, and prints what the study holds at the end: completed trials, configurations
measured (and measured twice), trials answered from storage, failed, pruned and left waiting, attributes missing,
and the workers' exit codes.

    python -m tests.harness.distributed_study --storage postgres --workers 4 --trials 40
    python -m tests.harness.distributed_study --storage postgres --workers 4 --trials 40 --kill-every 5
    python -m tests.harness.distributed_study --storage journal --workers 4 --trials 40 --kill-after 2

A fault counted in measured configurations (``--kill-after``, ``--restart-db-after``) fires as often on a busy
machine as on an idle one: the tests use those, so that how many faults a run sees does not depend on the
machine's speed. The run fails if no configuration is measured for ``--stall`` seconds (a hang), not after a
fixed wall time.

A tiny random model and the embedded synthetic tasks keep a trial at a few seconds of CPU.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Seconds between looks at the study: short enough that a look rarely sees more than one new configuration on an
#: idle machine (a fault counted in configurations then fires between any two), long enough that reading the study
#: costs the workers little.
POLL_S = 0.25

#: What every completed trial must carry.
ATTRIBUTES = ("config", "latency", "speedup", "prefill_ms", "accuracy", "accuracy_mean", "full_accuracy",
              "drop_points", "items", "hardware", "versions")


def worker_argv(url: str, trials: int, heartbeat: int, model: str) -> list[str]:
    return [sys.executable, "-m", "poptune", "study", "--model", model, "--tasks", "embedded", "--limit", "4",
            "--lengths", "300", "--repeats", "1", "--precision", "0", "--storage", url, "--max-trials", str(trials),
            "--heartbeat", str(heartbeat), "--worker"]


@dataclass
class Schedule:
    """When a fault fires: every ``seconds`` of wall time and/or each time ``measured`` more configurations are in
    the study than when it last fired (0: never on that count). Never once the study is full."""

    seconds: float = 0.0
    measured: int = 0
    _at_time: float = field(default=math.inf, init=False)
    _at_count: float = field(default=math.inf, init=False)

    def start(self, now: float) -> "Schedule":
        self._at_time = now + self.seconds if self.seconds else math.inf
        self._at_count = self.measured or math.inf
        return self

    def due(self, now: float, measured: int) -> bool:
        return now >= self._at_time or measured >= self._at_count

    def fired(self, now: float, measured: int) -> None:
        self._at_time = now + self.seconds if self.seconds else math.inf
        self._at_count = measured + self.measured if self.measured else math.inf

    def stop(self) -> None:
        self._at_time = self._at_count = math.inf


def run_workers(url: str, *, workers: int, trials: int, heartbeat: int = 2, model: str = "tiny-llama",
                kill: Schedule | None = None, restart_db: Any = None, restart: Schedule | None = None,
                stall: float = 900.0, seed: int = 0) -> dict:
    """Run the workers to the end with the faults asked for (``kill``, ``restart`` of ``restart_db``); returns the
    figures (see :func:`summarise`).

    Raises:
        TimeoutError: no configuration was measured for ``stall`` seconds while workers ran.
    """
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    argv = worker_argv(url, trials, heartbeat, model)
    logs = tempfile.TemporaryDirectory(prefix="poptune-workers-")
    starts = Counter()

    def start(i: int) -> subprocess.Popen:
        starts[i] += 1
        log = open(Path(logs.name) / f"worker-{i}-{starts[i]}.log", "w")
        return subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)

    rng = random.Random(seed)
    began = time.monotonic()
    kill, restart = (kill or Schedule()).start(began), (restart or Schedule()).start(began)
    procs = {i: start(i) for i in range(workers)}
    codes: dict[int, int] = {}
    kills = restarts = 0
    kills_stopped_s = None
    measured, progressed, polled = 0, began, -math.inf
    try:
        while procs:
            now = time.monotonic()
            if now - polled >= POLL_S:
                done, polled = _completed(url, measured), now
                if done > measured:
                    measured, progressed = done, now
            if now - progressed > stall:
                raise TimeoutError(f"no configuration measured in {stall:.0f} s ({measured} of {trials} so far)")
            for i, proc in list(procs.items()):
                if proc.poll() is not None:
                    codes[i] = proc.returncode
                    del procs[i]
            if procs and measured >= trials and kills_stopped_s is None:
                # The study is full: stop the faults and let the workers notice and exit. Killing on would
                # starve the last worker, whose start (Python, torch, the model) takes longer than a period.
                kill.stop()
                restart.stop()
                kills_stopped_s = round(now - began, 1)
            if procs and kill.due(now, measured):
                i = rng.choice(sorted(procs))
                procs[i].send_signal(signal.SIGKILL)
                procs[i].wait()
                procs[i] = start(i)  # a scheduler starts the worker again
                kills += 1
                kill.fired(now, measured)
            if procs and restart.due(now, measured):
                restart_db.restart()
                restarts += 1
                restart.fired(now, measured)
            time.sleep(0.1)
        wall = time.monotonic() - began
        failed_logs = {i: (Path(logs.name) / f"worker-{i}-{starts[i]}.log").read_text()[-2000:]
                       for i, code in codes.items() if code}
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()
        logs.cleanup()
    return {"workers": workers, "budget": trials, "kills": kills, "kills_stopped_s": kills_stopped_s,
            "db_restarts": restarts, "wall_s": round(wall, 1), "exit_codes": [codes[i] for i in sorted(codes)],
            "failed_worker_logs": failed_logs, **summarise(url)}


_storages: dict[str, object] = {}


def _completed(url: str, last: int = 0) -> int:
    """Measured configurations in the study so far (0 before a worker has made it): the budget's count; ``last``
    while the storage cannot be read (a database restarting)."""
    from poptune import store

    try:
        if url not in _storages:
            _storages[url] = store.open_storage(url, heartbeat=None)
        storage = _storages[url]
        studies = storage.get_all_studies()
        if not studies:
            return 0
        trials = store.completed(store.load_study(storage, studies[0].study_name))
    except Exception:  # noqa: BLE001 -- a restarting server or a journal being written: read again at the next look
        return last
    return sum(not store.is_answer(t) for t in trials)


def summarise(url: str) -> dict:
    """What the study holds: trial states, measured and reused configurations, incomplete attributes."""
    import optuna

    from poptune import store

    study = store.load_study(store.open_storage(url, heartbeat=None), None)
    trials = study.get_trials(deepcopy=False)
    states = Counter(t.state.name for t in trials)
    completed = store.completed(study)
    measured = Counter(json.dumps(t.config.to_dict(), sort_keys=True) for t in map(store.StoredTrial.of, completed)
                       if t.reused_from is None)
    incomplete = [t.number for t in completed
                  if set(ATTRIBUTES) - set(t.user_attrs) or not all(math.isfinite(v) for v in t.values)]
    failed = [t for t in trials if t.state == optuna.trial.TrialState.FAIL]
    return {
        "study": study.study_name,
        "completed": len(completed),
        "measured": sum(measured.values()),
        "measured_twice": sorted(k for k, n in measured.items() if n > 1),
        "reused": len(completed) - sum(measured.values()),
        "failed": len(failed),
        "failed_retried": sum(1 for t in trials if "failed_trial" in t.system_attrs),
        "pruned": states.get("PRUNED", 0),
        "waiting": states.get("WAITING", 0),
        "running": states.get("RUNNING", 0),
        "incomplete_attributes": incomplete,
    }


def _print(label: str, r: dict) -> None:
    print(f"{label}: {r['workers']} workers, budget {r['budget']}, {r['kills']} kill -9, {r['db_restarts']} database "
          f"restarts, {r['wall_s']} s"
          + (f" (kills stopped at {r['kills_stopped_s']} s: the study was full)" if r.get("kills_stopped_s") else ""))
    print(f"  completed {r['completed']} (measured {r['measured']}, answered from storage {r['reused']}); "
          f"measured twice: {len(r['measured_twice'])}; failed {r['failed']} (retried {r['failed_retried']}), "
          f"pruned {r['pruned']}, waiting {r['waiting']}, running {r['running']}; "
          f"incomplete attributes: {len(r['incomplete_attributes'])}; worker exit codes {r['exit_codes']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--storage", choices=("postgres", "journal"), default="postgres")
    parser.add_argument("--url", help="an existing empty PostgreSQL database (default: a throwaway local server)")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--trials", type=int, default=40, help="the study's budget of completed trials")
    parser.add_argument("--kill-every", type=float, default=0.0, help="SIGKILL one worker every S seconds")
    parser.add_argument("--kill-after", type=int, default=0,
                        help="SIGKILL one worker each time N more configurations are measured")
    parser.add_argument("--restart-db-every", type=float, default=0.0, help="restart the local server every S seconds")
    parser.add_argument("--restart-db-after", type=int, default=0,
                        help="restart the local server each time N more configurations are measured")
    parser.add_argument("--stall", type=float, default=900.0,
                        help="fail if no configuration is measured for S seconds (default: 900)")
    parser.add_argument("--heartbeat", type=int, default=2)
    parser.add_argument("--model", default="tiny-llama")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # `timeout` too: stop the workers and the server

    from poptune.testing.pgserver import LocalPostgres

    with tempfile.TemporaryDirectory(prefix="poptune-dist-") as tmp:
        server = None
        if args.storage == "journal":
            url = f"journal:{tmp}/study.journal"
        elif args.url:
            url = args.url
        else:
            server = LocalPostgres().start()
            url = server.create_database("study")
        try:
            result = run_workers(url, workers=args.workers, trials=args.trials, heartbeat=args.heartbeat,
                                 model=args.model, kill=Schedule(args.kill_every, args.kill_after),
                                 restart_db=server, restart=Schedule(args.restart_db_every, args.restart_db_after),
                                 stall=args.stall)
        finally:
            if server is not None:
                server.stop()
    result["storage"] = args.storage
    _print(args.storage, result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    ok = (result["measured"] == args.trials and not result["measured_twice"] and not result["incomplete_attributes"]
          and not any(result["exit_codes"]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
