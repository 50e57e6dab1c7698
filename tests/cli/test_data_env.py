"""``$POPTUNE_DATA`` naming a file is said to be a file, not a missing folder (issue 57)."""

from __future__ import annotations

from poptune.cli import main


def test_poptune_data_naming_a_file_says_it_is_not_a_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data.txt").write_text("not a folder\n")
    monkeypatch.setenv("POPTUNE_DATA", str(tmp_path / "data.txt"))
    code = main(["study", "--model", "tiny-llama", "--tasks", "piqa", "--storage", f"sqlite:///{tmp_path}/s.db"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "not a folder" in err and "does not exist" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.txt"]
