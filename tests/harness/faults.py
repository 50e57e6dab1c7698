"""Harness: faults during a study (tiny random model, SQLite); prints a Markdown table of what each cost.

Usage::

    python -m tests.harness.faults                 # every fault (a few minutes on 2 CPUs)
    python -m tests.harness.faults -k sigint       # only faults whose name holds "sigint"

Faults: kill -9 mid-trial then the same command again, SIGINT and SIGTERM mid-trial (time to exit, the summary
line) then the same command again, SIGINT and kill -9 in the full model's trial then the same command (issue 87),
a second process on the same SQLite study, a full disk (a 1 MiB tmpfs filled up, as root), a read-only output
folder, a journal whose last record a killed writer cut (then the same command).
For each: the exit code, the line printed, the seconds, and what was lost
(completed trials before the fault against after the recovery; a configuration measured twice).
"""

from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository root
STUDY = ["study", "--model", "tiny-llama", "--tasks", "passkey", "--limit", "2", "--lengths", "300", "--repeats", "1",
         "--heartbeat", "2", "--certify", "8"]


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", CUDA_VISIBLE_DEVICES="")


def start(argv: list[str], cwd: Path) -> subprocess.Popen:
    """``python -m poptune argv`` in the background (stderr captured)."""
    return subprocess.Popen([sys.executable, "-m", "poptune", *argv], cwd=cwd, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, errors="replace")


def run(argv: list[str], cwd: Path, timeout: float = 900) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-m", "poptune", *argv], cwd=cwd, env=_env(), capture_output=True,
                          text=True, errors="replace", timeout=timeout)
    return done.returncode, _lines(done.stderr)


def _lines(stderr: str) -> str:
    """stderr without the progress bars (the study's bar and its indented phase bar, with their redraws)."""
    text = stderr.replace("\x1b[A", "").replace("\r", "\n")
    lines = [line for line in text.splitlines() if line.strip() and not line[0].isspace()
             and not line.startswith("configurations measured:")]
    return "\n".join(lines)


def states(db: Path) -> list[tuple[int, str]]:
    """(number, state) of every trial, read without a write (and without waiting on a writer)."""
    if not db.exists():
        return []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return conn.execute("SELECT number, state FROM trials ORDER BY number").fetchall()
    except sqlite3.Error:
        return []
    finally:
        conn.close()


def completed_values(db: Path) -> dict[int, tuple]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        rows = conn.execute("SELECT t.number, v.objective, v.value FROM trials t JOIN trial_values v "
                            "ON v.trial_id = t.trial_id WHERE t.state = 'COMPLETE'").fetchall()
    finally:
        conn.close()
    values: dict[int, list] = {}
    for number, _objective, value in sorted(rows):
        values.setdefault(number, []).append(value)
    return {k: tuple(v) for k, v in values.items()}


def measured_configs(db: Path) -> list[str]:
    """The configuration of every completed trial that was measured: not answered from an earlier one, and not a
    re-timing of an earlier one that a failed null check asked for (``remeasure_of``)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        rows = conn.execute("SELECT t.trial_id, a.key, a.value_json FROM trials t JOIN trial_user_attributes a "
                            "ON a.trial_id = t.trial_id WHERE t.state = 'COMPLETE' AND a.key IN "
                            "('config', 'reused_from', 'remeasure_of')").fetchall()
    finally:
        conn.close()
    attrs: dict[int, dict] = {}
    for trial, key, value in rows:
        attrs.setdefault(trial, {})[key] = value
    return [a["config"] for a in attrs.values() if "reused_from" not in a and "remeasure_of" not in a]


def wait_mid_trial(proc: subprocess.Popen, db: Path, complete: int = 1, timeout: float = 600) -> None:
    """Until ``complete`` trials completed and another runs (a measurement in progress)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        found = [s for _, s in states(db)]
        if found.count("COMPLETE") >= complete and "RUNNING" in found:
            time.sleep(1.0)  # into the measurement
            return
        time.sleep(0.2)
    raise RuntimeError(f"the study never reached a running trial: {states(db)}")


def signal_fault(folder: Path, signum: int) -> dict:
    db = folder / "s.db"
    argv = [*STUDY, "--trials", "3", "--storage", f"sqlite:///{db}"]
    proc = start(argv, folder)
    wait_mid_trial(proc, db)
    before = completed_values(db)
    sent = time.monotonic()
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    seconds = time.monotonic() - sent
    failed = [n for n, s in states(db) if s == "FAIL"]
    code, _ = run(argv, folder)
    after = completed_values(db)
    lost = [n for n in before if after.get(n) != before[n]]
    twice = len(measured_configs(db)) - len(set(measured_configs(db)))
    return dict(exit=proc.returncode, line=err.splitlines()[-1] if err else "", seconds=seconds,
                lost=f"{len(before)} completed before, all kept ({'none' if not lost else lost} lost); "
                     f"{len(failed)} trial failed as interrupted and re-run; resume exit {code}, "
                     f"{len(after)} completed; {twice} configurations measured twice")


def kill9_fault(folder: Path) -> dict:
    db = folder / "s.db"
    argv = [*STUDY, "--trials", "3", "--storage", f"sqlite:///{db}"]
    proc = start(argv, folder)
    wait_mid_trial(proc, db)
    before = completed_values(db)
    proc.kill()
    proc.communicate()
    time.sleep(6.5)  # past the grace period of three 2 s heartbeats
    started = time.monotonic()
    code, err = run(argv, folder)
    after = completed_values(db)
    lost = [n for n in before if after.get(n) != before[n]]
    stale = [n for n, s in states(db) if s == "FAIL"]
    return dict(exit=proc.returncode, line=f"resume: exit {code} in {time.monotonic() - started:.0f} s", seconds=0.0,
                lost=f"{len(before)} completed before, {'all kept' if not lost else f'{lost} lost'}; the killed trial "
                     f"{stale} failed as stale and retried; {len(after)} completed after the resume")


def full_model_fault(folder: Path, signum: int) -> dict:
    """SIGINT or kill -9 while trial 0 measures the full model, then the same command (issue 87): the full model's
    trial is queued again and measured by the resuming process, which never waits for it itself."""
    db = folder / "s.db"
    argv = [*STUDY[:-4], "--heartbeat", "1", "--no-confirm", "--trials", "3", "--storage", f"sqlite:///{db}"]
    proc = start(argv, folder)
    wait_mid_trial(proc, db, complete=0)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    if signum == signal.SIGKILL:
        time.sleep(3.5)  # past the grace period of three 1 s heartbeats
    started = time.monotonic()
    try:
        code, _ = run(argv, folder, timeout=300)
    except subprocess.TimeoutExpired:
        code = None
    configs = measured_configs(db)
    full = sum('"skip": 0' in c for c in configs)
    return dict(exit=proc.returncode, line=f"resume: exit {code} in {time.monotonic() - started:.0f} s",
                seconds=0.0, lost=f"the full model measured {full} time(s) after the resume; {len(configs)} "
                                  f"configurations measured, {len(configs) - len(set(configs))} twice")


def two_processes_fault(folder: Path) -> dict:
    db = folder / "s.db"
    argv = [*STUDY, "--trials", "3", "--storage", f"sqlite:///{db}"]
    first = start(argv, folder)
    wait_mid_trial(first, db, complete=0)
    first.send_signal(signal.SIGSTOP)  # it keeps its lock and cannot finish before the second starts
    started = time.monotonic()
    try:
        code, err = run(argv, folder)
    finally:
        first.send_signal(signal.SIGCONT)
    seconds = time.monotonic() - started
    first.communicate(timeout=900)
    configs = measured_configs(db)
    return dict(exit=code, line=err.splitlines()[0] if err else "", seconds=seconds,
                lost=f"first worker exit {first.returncode}, {len(completed_values(db))} completed; "
                     f"{len(configs) - len(set(configs))} configurations measured twice")


def full_disk_fault(folder: Path, journal: bool = False) -> dict:
    """A study resumed on a full disk (a 1 MiB tmpfs filled up): SQLite, or a journal file with ``journal``."""
    if os.geteuid() != 0:
        return dict(exit=None, line="skipped: mounting a small tmpfs needs root", seconds=0.0, lost="")
    disk = folder / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], check=True)
    try:
        path = disk / ("s.journal" if journal else "s.db")
        url = f"journal:{path}" if journal else f"sqlite:///{path}"
        read = journal_completed if journal else completed_values
        run([*STUDY, "--trials", "1", "--storage", url], folder)
        before = read(path)
        fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)  # the rest of the disk
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        started = time.monotonic()
        code, err = run([*STUDY, "--add", "1", "--storage", url], folder)  # a trial to write
        seconds = time.monotonic() - started
        (disk / "filler").unlink()
        after = read(path)
        kept = all(after.get(n) == v for n, v in before.items())
        where = (f"journal readable ({len(after)} completed), {len(err.splitlines())} line(s) on stderr" if journal
                 else f"database readable ({len(after)} completed), states {sorted(set(s for _, s in states(path)))}")
        return dict(exit=code, line=err.splitlines()[0] if err else "", seconds=seconds,
                    lost=f"{len(before)} completed before, {'all kept' if kept else 'CHANGED'}; {where}")
    finally:
        subprocess.run(["umount", str(disk)])


def stale_lock_fault(folder: Path) -> dict:
    """A relative journal path (the docs' `journal:studies/poptune.journal`) whose lock a killed writer left."""
    (folder / "studies").mkdir()
    argv = [*STUDY, "--trials", "1", "--storage", "journal:studies/s.journal"]
    run(argv, folder)
    before = journal_completed(folder / "studies" / "s.journal")
    os.symlink("studies/s.journal", folder / "studies" / "s.journal.lock")  # as a writer killed holding it left it
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "poptune", *argv[:-4], "--trials", "2", *argv[-2:]], cwd=folder,
                              env=_env(), capture_output=True, text=True, errors="replace", timeout=300)
        code, err = done.returncode, _lines(done.stderr)
    except subprocess.TimeoutExpired:
        code, err = None, "still waiting on the lock after 300 s (killed)"
    after = journal_completed(folder / "studies" / "s.journal")
    line = next((x for x in err.splitlines() if "lock" in x), err.splitlines()[0] if err else "")
    return dict(exit=code, line=line, seconds=time.monotonic() - started,
                lost=f"{len(before)} completed before, {len(after)} after; the stale lock released after its grace")


def journal_completed(path: Path) -> dict[int, tuple]:
    """Completed trials of a journal's one study, number -> values, read as Optuna reads (the file unchanged)."""
    import optuna
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    storage = JournalStorage(JournalFileBackend(str(path)))
    studies = storage.get_all_studies()
    if not studies:
        return {}
    trials = storage.get_all_trials(studies[0]._study_id, states=(optuna.trial.TrialState.COMPLETE,))
    return {t.number: tuple(t.values) for t in trials}


def journal_cut_fault(folder: Path) -> dict:
    """A journal whose last record was cut mid-append (what kill -9 or a full disk leaves), then the same command."""
    journal = folder / "s.journal"
    argv = [*STUDY, "--trials", "2", "--storage", f"journal:{journal}"]
    run(argv, folder)
    data = journal.read_bytes()
    last = data.rfind(b"\n", 0, len(data) - 1) + 1
    journal.write_bytes(data[:last + (len(data) - last) // 2])  # half of the last record written
    before = journal_completed(journal)
    started = time.monotonic()
    code, err = run([*argv[:-4], "--trials", "3", *argv[-2:]], folder)
    seconds = time.monotonic() - started
    after = journal_completed(journal)
    lost = [n for n in before if after.get(n) != before[n]]
    aside = folder / "s.journal.partial"
    cut = next((line for line in err.splitlines() if "partial" in line), "no line about the cut")
    return dict(exit=code, line=cut, seconds=seconds,
                lost=f"{len(before)} completed before, {'all kept' if not lost else f'{lost} lost'}; "
                     f"{len(after)} completed after the resume; the cut bytes kept in s.journal.partial "
                     f"({aside.stat().st_size if aside.exists() else 0} B)")


def read_only_output_fault(folder: Path) -> dict:
    out = folder / "ro"
    out.mkdir()
    if os.geteuid() == 0:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(out)], check=True)
    else:
        out.chmod(0o500)
    try:
        started = time.monotonic()
        code, err = run(["bench", "--model", "tiny-llama", "--skip", "1", "--lengths", "16", "--repeats", "1",
                         "--out", f"{out}/b.json"], folder)
        return dict(exit=code, line=err.splitlines()[0] if err else "", seconds=time.monotonic() - started,
                    lost="nothing measured, nothing written")
    finally:
        if os.path.ismount(out):
            subprocess.run(["umount", str(out)])


FAULTS = {
    "kill -9 mid-trial, then the same command": kill9_fault,
    "SIGINT mid-trial, then the same command": lambda d: signal_fault(d, signal.SIGINT),
    "SIGTERM mid-trial, then the same command": lambda d: signal_fault(d, signal.SIGTERM),
    "SIGINT in the full model's trial, then the same command": lambda d: full_model_fault(d, signal.SIGINT),
    "kill -9 in the full model's trial, then the same command": lambda d: full_model_fault(d, signal.SIGKILL),
    "two processes on one SQLite study": two_processes_fault,
    "full disk (1 MiB tmpfs) on resume": full_disk_fault,
    "read-only output folder (bench --out)": read_only_output_fault,
    "journal cut mid-append, then the same command": journal_cut_fault,
    "full disk (1 MiB tmpfs) under a journal, on resume": lambda d: full_disk_fault(d, journal=True),
    "relative journal path with a stale lock, then the same command": stale_lock_fault,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", default="", help="only faults whose name holds this text (case-insensitive)")
    args = parser.parse_args()
    lines = ["| fault | exit | line printed | s | what was lost |", "|---|---|---|---|---|"]
    for name, fault in FAULTS.items():
        if args.k.lower() not in name.lower():
            continue
        with tempfile.TemporaryDirectory(prefix="poptune-fault-") as scratch:
            row = fault(Path(scratch))
        print(f"{name}: {row}", file=sys.stderr)
        line = row["line"].replace(scratch, "D").replace("|", "\\|")[:160]
        lines.append(f"| {name} | {row['exit']} | `{line}` | {row['seconds']:.1f} | {row['lost']} |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
