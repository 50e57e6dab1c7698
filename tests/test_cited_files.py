"""What the documentation and the boards cite exists, and the claims issue 86 found stale are gone.

Every backticked repository path in ``README.md``, ``docs/*.md`` and ``leaderboards/*.md`` that names a file of
the package, the tests, the benchmarks, the docs, the examples or the boards (``poptune/...py``,
``tests/...py``, ``benchmarks/...``, a ``*`` pattern matching at least one file) must exist, as must every relative
Markdown link of these files. A path with a placeholder (``<hardware>``, ``...``) is a pattern for files a command
writes, and a name without an extension is a folder or no file's (a Gymnasium id): neither is checked.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: A backticked repository path, up to a space, a colon or the closing backtick.
CITED = re.compile(r"`((?:poptune|tests|benchmarks|docs|examples|leaderboards)/[^`\s:,;()]+)")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "leaderboards").glob("*.md"))]


def _missing(text: str, folder: Path) -> list[str]:
    missing = []
    for path in CITED.findall(text):
        if re.search(r"[<>{}]|\.\.\.", path) or not re.search(r"\.[a-z]+$|\*", path.rstrip(".")):
            continue  # a pattern for what a command writes, a folder, or a name that is not a file's (an env id)
        path = path.rstrip(".")
        if "*" in path:
            if not list(ROOT.glob(path)):
                missing.append(path)
        elif not (ROOT / path).exists():
            missing.append(path)
    for target in LINK.findall(text):
        if "://" in target or target.startswith("mailto:") or re.search(r"[<>{}]", target):
            continue
        if not (folder / target).exists():
            missing.append(target)
    return missing


def test_every_cited_file_exists():
    found = {str(doc.relative_to(ROOT)): _missing(doc.read_text(encoding="utf-8"), doc.parent)
             for doc in _documents()}
    assert not {doc: paths for doc, paths in found.items() if paths}


def test_a_missing_file_is_found():
    assert _missing("see `poptune/comparison/decisions.py` and `tests/comparison/test_decisions.py`", ROOT) == [
        "poptune/comparison/decisions.py", "tests/comparison/test_decisions.py"]
    assert _missing("`leaderboards/nothing-*`, [x](docs/none.md), `poptune/tune/certify.py`", ROOT) == [
        "leaderboards/nothing-*", "docs/none.md"]


#: Claims issue 86 found stale or wrong, each with where it must not be said again.
STALE = (
    ("README.md", "83% of"), ("README.md", "4% of the time, as it says"),
    ("README.md", "the command ends within its budget without a"),
    ("README.md", "one-sided 98.8%, valid"),
    ("leaderboards/study-embedded-default-gemma-3-270m-cpu-intel-xeon-processor-2t.md", "together wrong at most"),
    ("poptune/evaluate/paired.py", "at 95%: the interval's upper end"),
    ("poptune/tune/certify.py", "Only the clock moves the cap, never an outcome"),
    ("docs/tuning.md", "Only the clock moves"),
    ("leaderboards/methods-decisions-simulated-cpu-intel-xeon-processor-2t.md",
     "# Methods board verdicts, simulated (cpu-intel-xeon-processor-1t)"),
)


def test_the_stale_claims_are_gone():
    said = [(path, phrase) for path, phrase in STALE
            if phrase in " ".join((ROOT / path).read_text(encoding="utf-8").split())]
    assert not said
