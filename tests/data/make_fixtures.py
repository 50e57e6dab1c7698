"""Regenerate the test fixtures in this folder from a full data directory (the layout of ``/work/shared/data``).

Every fixture line is a verbatim line of the full file: the first lines of the short-item sets (and of their label
files, so labels stay aligned), the first lines of WikiText-2, and the few shortest rows of each long-prompt set
(kept in file order). It prints, per file, the source lines taken, so ``README.md`` can say which.

Usage (from the repository root):
    python tests/data/make_fixtures.py ../shared/data            # write tests/data/...
    python tests/data/make_fixtures.py ../shared/data --check     # only say whether tests/data is up to date
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: File -> how many of its first lines to keep. Label files keep as many lines as their documents.
HEAD: dict[str, int] = {
    "piqa/valid.jsonl": 8,
    "piqa/valid-labels.lst": 8,
    "arc/ARC-Challenge-Test.jsonl": 8,
    "arc/ARC-Easy-Test.jsonl": 8,
    "hellaswag/hellaswag_val.jsonl": 8,
    "winogrande/dev.jsonl": 8,
    "winogrande/dev-labels.lst": 8,
    "boolq/dev.jsonl": 8,
    "wikitext-2/test.txt": 40,
    "wikitext-2/valid.txt": 20,
}

#: Long-prompt file -> how many of its shortest rows (by characters; ties by line order) to keep, in file order.
SHORTEST: dict[str, int] = {
    "longctx/squad.jsonl": 3,
    "longctx/drop.jsonl": 3,
    "longctx/coqa.jsonl": 3,
    "longctx/gsm8k.jsonl": 3,
    "longctx/qasper_yesno.jsonl": 3,
}


def _lines(path: Path) -> list[str]:
    # newline="" keeps the original line endings byte for byte.
    with path.open(encoding="utf-8", newline="") as f:
        return f.readlines()


def selected(source: Path, rel: str) -> list[int]:
    """The 1-based line numbers of ``source / rel`` that go into the fixture, ascending."""
    lines = _lines(source / rel)
    if rel in HEAD:
        return list(range(1, min(HEAD[rel], len(lines)) + 1))
    by_length = sorted(range(len(lines)), key=lambda i: (len(lines[i]), i))
    return sorted(i + 1 for i in by_length[: SHORTEST[rel]])


def _spans(numbers: list[int]) -> str:
    if numbers == list(range(numbers[0], numbers[-1] + 1)):
        return f"{numbers[0]}-{numbers[-1]}"
    return ", ".join(map(str, numbers))


def build(source: Path) -> dict[str, tuple[bytes, list[int]]]:
    """Fixture path (relative) -> (its bytes, the source line numbers behind them)."""
    out = {}
    for rel in (*HEAD, *SHORTEST):
        lines = _lines(source / rel)
        numbers = selected(source, rel)
        out[rel] = ("".join(lines[n - 1] for n in numbers).encode("utf-8"), numbers)
    return out


def main(argv: list[str] | None = None) -> int:
    """Write (or with ``--check`` compare) the fixtures; print one table row per file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="full data directory (the layout of /work/shared/data)")
    parser.add_argument("--out", type=Path, default=HERE, help="fixture folder (default: this script's folder)")
    parser.add_argument("--check", action="store_true", help="compare with --out instead of writing")
    args = parser.parse_args(argv)
    stale = []
    print("| fixture | source lines | bytes | sha256 (first 16) |\n|---|---|---:|---|")
    for rel, (data, numbers) in build(args.source).items():
        target = args.out / rel
        if args.check:
            if not target.is_file() or target.read_bytes() != data:
                stale.append(rel)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        print(f"| `{rel}` | {_spans(numbers)} | {len(data)} | `{hashlib.sha256(data).hexdigest()[:16]}` |")
    if stale:
        print(f"out of date: {', '.join(stale)}", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
