"""Rebuild ``support.jsonl`` from openly licensed text already in this repository (see README.md here).

    python examples/prompts/make_prompts.py        # from the repository root; rewrites support.jsonl

Deterministic: the same file every run. Sources: tests/data fixtures (ARC, BoolQ, PIQA, WikiText-2) and the
public-domain chapter of *Pride and Prejudice* in poptune/measure/timing_prompts.py.
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def arc() -> list[dict]:
    """Short chat requests: a multiple-choice science question (ARC, CC BY-SA 4.0), the key as the answer."""
    out = []
    for name in ("ARC-Easy-Test.jsonl", "ARC-Challenge-Test.jsonl"):
        for row in _jsonl(DATA / "arc" / name)[:5]:
            choices = "\n".join(f"{c['label']}. {c['text']}" for c in row["question"]["choices"])
            out.append({"messages": [
                {"role": "system", "content": "You are a concise tutor. Reply with the letter of the best choice."},
                {"role": "user", "content": f"{row['question']['stem']}\n{choices}"}],
                "max_tokens": 8, "answer": row["answerKey"]})
    return out


def boolq() -> list[dict]:
    """Medium prompts: a passage and a yes/no question (BoolQ, CC BY-SA 3.0), its label as the answer."""
    return [{"prompt": f"{row['passage']}\n\nQuestion: {row['question']}?\nAnswer (yes or no):",
             "max_tokens": 4, "answer": "yes" if row["answer"] else "no"}
            for row in _jsonl(DATA / "boolq" / "dev.jsonl")]


def piqa() -> list[dict]:
    """Short chat requests without a reference: how-to questions (PIQA goals, AFL-3.0)."""
    return [{"messages": [{"role": "user", "content": row["goal"]}], "max_tokens": 32}
            for row in _jsonl(DATA / "piqa" / "valid.jsonl")]


def wikitext() -> list[dict]:
    """Medium-long prompts: a Wikipedia article's paragraphs to summarise (WikiText-2 test, CC BY-SA 3.0)."""
    paragraphs = [line.strip() for line in (DATA / "wikitext-2" / "test.txt").read_text(encoding="utf-8").splitlines()
                  if len(line.strip()) > 200]
    out = []
    for k in range(0, min(len(paragraphs), 8), 2):
        text = " ".join(paragraphs[k : k + 2])
        out.append({"prompt": f"Summarise in one sentence:\n\n{text}\n\nSummary:", "max_tokens": 32})
    return out


def austen() -> list[dict]:
    """Long prompts: the first chapter of Pride and Prejudice (1813, public domain) with questions."""
    import sys

    sys.path.insert(0, str(ROOT))
    from poptune.measure.timing_prompts import demo_prompt

    base = demo_prompt().rsplit("Question:", 1)[0]
    questions = ("Who is Mr. Bingley?", "How many daughters do the Bennets have?",
                 "What does Mrs. Bennet want her husband to do?", "How does Mr. Bennet tease his wife?")
    return [{"prompt": f"{base}Question: {q}\nAnswer:", "max_tokens": 32} for q in questions]


def main() -> None:
    rows = arc() + boolq() + piqa() + wikitext() + austen()
    path = Path(__file__).with_name("support.jsonl")
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    print(f"{path}: {len(rows)} requests, {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
