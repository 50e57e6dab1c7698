"""The one check of a refused command line, shared by the CLI's bad-input tests: exit 2, one line on stderr, no
traceback, and no file under the folder touched."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from poptune.cli import main


def files_of(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` by relative path, with its content's sha256."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def refused(capsys: Any, folder: Path, *argv: str) -> str:
    """Run ``poptune argv``; assert exit 2, one stderr line, no traceback, no file under ``folder`` touched; return
    the line."""
    before = files_of(folder)
    try:
        code = main(list(argv))
    except SystemExit as e:  # argparse's own errors
        code = e.code
    _, err = capsys.readouterr()
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert files_of(folder) == before
    return err.strip()
