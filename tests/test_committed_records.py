"""Committed records and leaderboards show commands and files as a user types them: no path of the machine they
ran on (:func:`poptune.measure.provenance.typed_path`: ``../shared/data``, ``~/.cache/...``, ``<tmp>/out``)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("leaderboards", "studies")

#: An absolute path under a folder that names a machine's layout (not a URL's path: ``https://host/tmp/x`` has a
#: host before it; not a placeholder: ``<tmp>/x``, ``$OUT/x``, ``~/x``).
MACHINE_PATH = re.compile(r"(?<![\w.:/~<>$-])/(?:tmp|root|home|work|Users|var|opt|mnt|private|scratch)/[\w.-]+")


def _committed() -> list[Path]:
    try:
        listed = subprocess.run(["git", "ls-files", "-z", *FOLDERS], cwd=ROOT, capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):  # not a checkout: what the folders hold
        return [p for folder in FOLDERS for p in sorted((ROOT / folder).rglob("*")) if p.is_file()]
    return [ROOT / name for name in listed.stdout.decode().split("\0") if name]


def _machine_paths(text: str) -> list[str]:
    return MACHINE_PATH.findall(text)


def test_the_scan_finds_what_it_exists_for():
    assert _machine_paths('"command": "python benchmarks/x.py --out /tmp/kvbig"') == ["/tmp/kvbig"]
    assert _machine_paths('{"data_dir":"/work/shared/data"}') == ["/work/shared"]
    assert _machine_paths('"file": "/root/.cache/poptune/kv-maps/a.safetensors"') == ["/root/.cache"]
    assert _machine_paths("--data-dir=/home/me/data") == ["/home/me"]
    typed = '--out <tmp>/kvbig --data-dir ../shared/data ~/.cache/x $OUT/gpu-check https://example.org/tmp/x'
    assert _machine_paths(typed) == []


@pytest.mark.parametrize("path", _committed(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_committed_record_names_a_path_of_the_machine_it_ran_on(path):
    if path.suffix in (".png", ".db", ".sqlite"):
        return  # images (and never a database: .gitignore keeps them out)
    found = _machine_paths(path.read_text(encoding="utf-8", errors="replace"))
    assert not found, f"{path.relative_to(ROOT)} names {sorted(set(found))[:3]}: write it as typed (typed_path)"
