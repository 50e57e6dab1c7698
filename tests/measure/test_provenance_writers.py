"""Every writer's provenance is the one record (:class:`poptune.measure.provenance.Provenance`), and its command
is as a user types it: no path of the machine it ran on.

The writers are run with the record replaced, wherever a module holds it, by one that marks each field it is
given: every mark must come out in what the writer writes, so no writer builds its provenance on its own.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from poptune.measure import provenance
from poptune.measure.provenance import Provenance, as_typed, typed_command

ROOT = Path(__file__).resolve().parents[2]
FAKE_STUDY = ROOT / "tests" / "reports" / "golden" / "fake-study.journal"
GRID_STUDY = ROOT / "leaderboards" / "raw" / "grid-gemma-3-270m-cpu-amd-epyc-2t.journal"
GRID_CSV = ROOT / "tests" / "tune" / "grid-fixture.csv"

#: What the marked record says, whatever a writer gives it.
MARKS = {"command": "poptune MARKED-COMMAND", "hardware": {"hardware_id": "marked-hw", "name": "Marked CPU"},
         "versions": {"marked": "9.9"}, "date": "MARKED-DATE", "model": "marked-model",
         "weights_fingerprint": "marked-fingerprint", "commit": "marked-commit"}


class Marked(Provenance):
    """The record with every field it is given replaced by its mark (a field left unknown stays unknown)."""

    def __init__(self, **given):
        super().__init__(**{name: MARKS[name] if value is not None else None for name, value in given.items()})


@pytest.fixture
def marked(monkeypatch):
    """The marked record in the place of :class:`Provenance`, in every module of the package that holds it."""
    for name, module in list(sys.modules.items()):
        if name.startswith("poptune") and getattr(module, "Provenance", None) is Provenance:
            monkeypatch.setattr(module, "Provenance", Marked)
    return MARKS


def _journal(tmp_path: Path, journal: Path) -> str:
    copy = tmp_path / journal.name
    shutil.copyfile(journal, copy)
    return f"journal:{copy}"


def test_the_methods_board_renders_each_records_provenance(marked, tmp_path):
    from poptune.comparison.board import write_methods_board

    md = next(p for p in write_methods_board(ROOT / "leaderboards" / "raw", tmp_path, command="c")
              if p.suffix == ".md").read_text()
    section = md.split("## Provenance")[1]
    assert "command `poptune MARKED-COMMAND`, MARKED-DATE" in section
    assert "hardware marked-hw (Marked CPU); marked 9.9" in section


def test_the_leaderboard_renders_the_studys_provenance(marked, tmp_path):
    from poptune.reports.leaderboard import write_leaderboards

    (tmp_path / "out").mkdir()
    written = write_leaderboards(_journal(tmp_path, FAKE_STUDY), tmp_path / "out", command="poptune leaderboard")
    md = next(p for p in written if p.suffix == ".md").read_text()
    section = md.split("## Provenance")[1]
    assert "- command: `poptune MARKED-COMMAND`" in section and "- hardware: marked-hw (Marked CPU)" in section
    assert "- versions: marked 9.9" in section and "- date: MARKED-DATE (the last measurement)" in section


def test_the_tuner_table_renders_its_provenance(marked, tmp_path):
    from poptune.reports.tunertable import TunerSpec, tuner_table

    out, _ = tuner_table(TunerSpec(grid=str(GRID_CSV), samplers=("random",), seeds=1, out=str(tmp_path / "t.md")),
                         "poptune tuners")
    section = out.read_text().split("## Provenance")[1]
    assert "- command: `poptune MARKED-COMMAND`" in section and "- date: MARKED-DATE; replay wall time" in section
    assert "versions marked 9.9" in section  # the grid file's versions, in its line


def test_the_grid_readme_renders_the_studys_and_each_runs_provenance(marked, tmp_path):
    from poptune import store
    from poptune.reports.gridtable import write

    url = _journal(tmp_path, GRID_STUDY)
    _, md_path = write(store.read_study(url, None), tmp_path, "poptune grid", url)
    md = md_path.read_text()
    assert "- Model marked-model (weights pretrained, fingerprint `marked-fingerprint`)" in md
    assert "hardware marked-hw (Marked CPU); marked 9.9." in md
    assert "commit `marked-commit`: `poptune MARKED-COMMAND`" in md  # each run's line


def test_an_export_carries_the_studys_provenance(marked, tmp_path):
    from poptune.reports.export import export_config

    data = export_config(_journal(tmp_path, FAKE_STUDY), None, max_drop=None)
    assert data["model"] == {"name": "marked-model", "weights_fingerprint": "marked-fingerprint"}
    assert data["hardware"] == MARKS["hardware"]
    assert data["provenance"]["versions"] == MARKS["versions"] and data["provenance"]["exported"] == "MARKED-DATE"


def test_an_importance_result_writes_its_provenance(marked):
    from poptune.baselines.importance import ImportanceResult, ImportanceSpec

    result = ImportanceResult(model="m", prefill=(1.0, 2.0), decode=(1.0, 1.0), spec=ImportanceSpec(), source="s",
                              loss=1.0, seconds=1.0, dtype="float32", device="cpu", hardware_id="h",
                              versions={"torch": "2"}, date="d", command="poptune importance")
    data = json.loads(result.to_json())
    assert (data["command"], data["hardware_id"], data["versions"], data["date"]) == (
        "poptune MARKED-COMMAND", "marked-hw", {"marked": "9.9"}, "MARKED-DATE")


def test_a_new_record_is_made_here_and_its_json_is_the_records(marked):
    made = Marked.here(command="poptune compare", hardware={"hardware_id": "h"})
    assert made.to_dict() == {"command": "poptune MARKED-COMMAND", "hardware": MARKS["hardware"],
                              "versions": MARKS["versions"], "date": "MARKED-DATE"}


def test_a_command_is_as_typed_with_no_absolute_path(monkeypatch, tmp_path):
    work = tmp_path / "clone"
    monkeypatch.setenv("OUT", "/root/out")
    monkeypatch.setenv("HOME", "/home/someone")
    argv = ["study", "--data-dir", f"{tmp_path}/shared/data", "--storage", f"journal:{work}/studies/s.journal",
            f"--storage=sqlite:///{work}/studies/s.db", "--out", "/root/out/x", "--prompts", "/home/someone/p.jsonl",
            "--out", "/tmp/sweep-out", "--model", "/models/llama-3", "--out=/dev/null", "--tasks", "a b"]
    typed = typed_command(argv, cwd=work)
    assert typed == ("poptune study --data-dir ../shared/data --storage journal:studies/s.journal "
                     "--storage=sqlite:///studies/s.db --out $OUT/x --prompts ~/p.jsonl --out <tmp>/sweep-out "
                     "--model <dir>/llama-3 --out=/dev/null --tasks 'a b'")
    machine = (str(tmp_path), "/root", "/home", "/tmp", "/models")
    assert not [w for w in as_typed(["poptune", *argv], cwd=work) if any(m in w for m in machine)]
    assert typed_command([f"{work}/benchmarks/x.py", "--out", f"{work}/o"], program=None, cwd=work) == (
        "python benchmarks/x.py --out o")
    assert typed_command([], program=None) == "python ?"


def test_the_commands_writers_record_are_typed(tmp_path):
    """The commands the command line hands its writers (grid, tuners, leaderboard, compare, importance) are
    made by typed_command alone: no writer joins a command line of its own."""
    import ast

    cli = ROOT / "poptune" / "cli"
    for path in cli.glob("*.py"):
        tree = ast.parse(path.read_text())
        joins = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "join"
                 and isinstance(n.value, ast.Name) and n.value.id == "shlex"]
        assert not joins, f"{path.name} joins a command line itself at lines {joins}: use typed_command"
    assert provenance.typed_command(["leaderboard", "--out", str(tmp_path / "lb")], cwd=tmp_path) == (
        "poptune leaderboard --out lb")
