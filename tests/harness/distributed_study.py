"""Several `poptune study` workers on one shared study, with faults: do they fill it exactly, once each?

Starts N worker processes (`poptune study --max-trials T`) on one storage -- a PostgreSQL database (a throwaway
local server unless --url is given) or a journal file -- optionally kills one worker with SIGKILL every few
seconds (and starts it again, as a scheduler would) or restarts the database server, and prints what the study
holds at the end: completed trials, configurations measured (and measured twice), trials answered from
storage, failed, pruned and left waiting, attributes missing, and the workers' exit codes.

    python -m tests.harness.distributed_study --storage postgres --workers 4 --trials 40
    python -m tests.harness.distributed_study --storage postgres --workers 4 --trials 40 --kill-every 5
    python -m tests.harness.distributed_study --storage journal --workers 4 --trials 40 --kill-every 5

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
from pathlib import Path

#: What every completed trial must carry.
ATTRIBUTES = ("config", "latency", "speedup", "prefill_ms", "accuracy", "accuracy_mean", "full_accuracy",
              "drop_points", "items", "hardware", "versions")


def worker_argv(url: str, trials: int, heartbeat: int, model: str) -> list[str]:
    return [sys.executable, "-m", "poptune", "study", "--model", model, "--tasks", "embedded", "--limit", "4",
            "--lengths", "300", "--repeats", "1", "--precision", "0", "--storage", url, "--max-trials", str(trials),
            "--heartbeat", str(heartbeat), "--worker"]


def run_workers(url: str, *, workers: int, trials: int, heartbeat: int = 2, model: str = "tiny-llama",
                kill_every: float = 0.0, restart_db: object = None, restart_every: float = 0.0,
                timeout: float = 1200.0, seed: int = 0) -> dict:
    """Run the workers to the end with the faults asked for; returns the figures (see :func:`summarise`)."""
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
    procs = {i: start(i) for i in range(workers)}
    codes: dict[int, int] = {}
    kills = restarts = 0
    kills_stopped_s = None
    next_kill = began + kill_every if kill_every else math.inf
    next_restart = began + restart_every if restart_every else math.inf
    try:
        while procs:
            now = time.monotonic()
            if now - began > timeout:
                raise TimeoutError(f"workers still running after {timeout:.0f} s")
            for i, proc in list(procs.items()):
                if proc.poll() is not None:
                    codes[i] = proc.returncode
                    del procs[i]
            if procs and now >= next_kill and _completed(url) >= trials:
                # The study is full: stop the faults and let the workers notice and exit. Killing on would
                # starve the last worker, whose start (Python, torch, the model) takes longer than a period.
                next_kill, kills_stopped_s = math.inf, round(now - began, 1)
            if procs and now >= next_kill:
                i = rng.choice(sorted(procs))
                procs[i].send_signal(signal.SIGKILL)
                procs[i].wait()
                procs[i] = start(i)  # a scheduler starts the worker again
                kills += 1
                next_kill = now + kill_every
            if procs and now >= next_restart:
                restart_db.restart()  # type: ignore[attr-defined]
                restarts += 1
                next_restart = now + restart_every
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


def _completed(url: str) -> int:
    """Measured configurations in the study so far (0 before a worker has made it): the budget's count."""
    from poptune import store

    if url not in _storages:
        _storages[url] = store.open_storage(url, heartbeat=None)
    storage = _storages[url]
    studies = storage.get_all_studies()
    if not studies:
        return 0
    trials = store.completed(store.load_study(storage, studies[0].study_name))
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
    parser.add_argument("--restart-db-every", type=float, default=0.0, help="restart the local server every S seconds")
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
                                 model=args.model, kill_every=args.kill_every, restart_db=server,
                                 restart_every=args.restart_db_every)
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
