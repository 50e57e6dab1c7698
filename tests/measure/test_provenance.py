"""Provenance: versions from the installed package's metadata, without importing the package root."""

from __future__ import annotations

import importlib.metadata
import platform

import torch

from poptune.measure import provenance


def test_versions_read_poptune_from_package_metadata(monkeypatch):
    found = provenance.versions()
    assert found["poptune"] == importlib.metadata.version("poptune")
    assert found["torch"] == torch.__version__ and found["python"] == platform.python_version()
    assert found["transformers"]

    def absent(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", absent)
    assert provenance.poptune_version() == "unknown"


def test_provenance_records_the_version_and_the_run():
    model = torch.nn.Linear(2, 2)
    record = provenance.provenance(model, model_name="tiny")
    assert record["poptune"] == provenance.poptune_version() and record["model"] == "tiny"
    assert record["dtype"] == "float32" and record["weights_fingerprint"] is None and record["load_end"] is None


def test_the_commit_is_dirty_with_code_changes_not_with_measured_outputs(tmp_path):
    import subprocess

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    for name in ("code.py", "leaderboards/grid.journal", "studies/README.md"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("one\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    clean = provenance.git_commit(tmp_path)
    assert clean is not None and len(clean) == 40
    (tmp_path / "leaderboards/grid.journal").write_text("one\ntwo\n")  # a grid's journal growing while measured
    (tmp_path / "studies/README.md").write_text("two\n")
    assert provenance.git_commit(tmp_path) == clean
    (tmp_path / "code.py").write_text("two\n")
    assert provenance.git_commit(tmp_path) == clean + "+dirty"


def test_the_commit_is_read_without_writing_into_the_checkout(tmp_path):
    """``git status`` refreshes a stale index and takes ``.git/index.lock`` to write it: a write into the install
    tree on every run (issue 87). Read with ``--no-optional-locks``, the index stays as it was."""
    import os
    import subprocess

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "code.py").write_text("one\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    index = tmp_path / ".git" / "index"
    os.utime(tmp_path / "code.py", ns=(1, 1))  # the index's stat of it stale: git status would rewrite the index
    before = (index.stat().st_mtime_ns, index.read_bytes())
    assert provenance.git_commit(tmp_path) is not None
    assert (index.stat().st_mtime_ns, index.read_bytes()) == before


def test_one_record_states_command_hardware_versions_and_date():
    hardware = {"hardware_id": "cpu-amd-epyc-2t", "name": "AMD EPYC 7B13", "kind": "cpu"}
    record = provenance.Provenance.here(command="poptune compare", hardware=hardware).to_dict()
    assert set(record) == {"command", "hardware", "versions", "date"} and record["versions"] == provenance.versions()
    assert record["hardware"] == hardware and record["date"].endswith("+00:00")
    made = provenance.Provenance(command=" poptune leaderboard --out x ", hardware=hardware,
                                 versions={"torch": "2", "poptune": "1"}, date="2026-01-01T00:00:00+00:00")
    assert made.lines(["study: `s`"], date_note=" (last)") == [
        "## Provenance", "", "- command: `poptune leaderboard --out x`", "- study: `s`",
        "- hardware: cpu-amd-epyc-2t (AMD EPYC 7B13)", "- versions: poptune 1, torch 2",
        "- date: 2026-01-01T00:00:00+00:00 (last)", ""]
    assert provenance.Provenance(command="c").lines() == ["## Provenance", "", "- command: `c`", ""]  # what is known
    assert made.sentence() == "hardware cpu-amd-epyc-2t (AMD EPYC 7B13); poptune 1, torch 2"
    assert provenance.Provenance(hardware={"hardware_id": "cpu-x", "kind": "cpu"}).hardware_text() == "cpu-x (cpu)"
    assert provenance.Provenance(hardware={"hardware_id": "cpu-x"}).hardware_text() == "cpu-x"


def test_the_record_reads_what_it_writes_and_every_stored_form():
    made = provenance.Provenance(command="poptune study", hardware={"hardware_id": "h"}, versions={"torch": "2"},
                                 date="d", model="m", weights_fingerprint="f", commit="c")
    assert provenance.Provenance.from_dict(made.to_dict()) == made
    assert made.to_dict()["git_commit"] == "c"
    run = {"command": ["/venv/bin/poptune", "study", "--model", "m"], "git_commit": "abc", "model": "m"}
    assert provenance.Provenance.from_dict(run) == provenance.Provenance(command="poptune study --model m",
                                                                         model="m", commit="abc")
    importance = {"hardware_id": "h", "versions": {"torch": "2"}, "date": "d", "command": "poptune importance"}
    assert provenance.Provenance.from_dict(importance).hardware == {"hardware_id": "h"}


def test_no_result_dates_itself_by_hand():
    # Every date in a written result comes from provenance.now(): no other module reads the clock for one (the
    # embedded model's cache manifest, a floor below the measurements, is not a result).
    from pathlib import Path

    root = Path(provenance.__file__).resolve().parents[1]
    by_hand = [str(p.relative_to(root)) for p in root.rglob("*.py") if p.name not in ("provenance.py", "embedded.py")
               and "isoformat(timespec=\"seconds\")" in p.read_text() and "datetime.now(" in p.read_text()]
    assert not by_hand, f"dated by hand (use poptune.measure.provenance.now): {by_hand}"


def test_a_recorded_command_is_as_typed_with_no_path_of_the_machine(monkeypatch, tmp_path):
    work = tmp_path / "clone"
    monkeypatch.setenv("OUT", "/root/out")
    monkeypatch.setenv("HOME", "/home/someone")
    typed = provenance.as_typed([f"{work}/poptune/__main__.py", "gpu-check", "--out", "/root/out/gpu-check",
                                 f"--data-dir={tmp_path}/shared/data", "--records", f"{work}/leaderboards/raw",
                                 "/home/someone/x.json", "--limit", "5"], cwd=work)
    assert typed == ["poptune", "gpu-check", "--out", "$OUT/gpu-check", "--data-dir=../shared/data", "--records",
                     "leaderboards/raw", "~/x.json", "--limit", "5"]
    assert provenance.as_typed([f"{work}/benchmarks/bench_item_cost.py"], cwd=work) == ["benchmarks/bench_item_cost.py"]
    assert provenance.as_typed(["/usr/local/bin/poptune", "study", "--out", "/srv/o"], cwd=work)[0] == "poptune"
