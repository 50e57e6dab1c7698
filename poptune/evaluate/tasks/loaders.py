"""Read the original local files of the offline task pack into the documents lm-eval's built-in tasks expect.

Each ``load_<task>`` function is the ``custom_dataset`` hook of one YAML in this folder. lm-eval calls it with
the task's ``dataset_kwargs`` (``data_files``: a file role mapped to an absolute path) and its metadata. It returns a
``DatasetDict`` whose rows have the fields of the hub dataset that the built-in task reads (``baber/piqa``,
``allenai/ai2_arc``, ``Rowan/hellaswag``, ``allenai/winogrande``, ``aps/super_glue`` boolq). That way the
YAMLs keep the built-in prompts, choices and targets unchanged.

Nothing is cached on disk: the files are small, and building rows in memory avoids the HF datasets cache.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from poptune.errors import DataError

if TYPE_CHECKING:
    import datasets

__all__ = [
    "SOURCES",
    "Source",
    "load_arc_challenge",
    "load_arc_easy",
    "load_boolq",
    "load_hellaswag",
    "load_piqa",
    "load_winogrande",
    "read_docs",
    "read_labels",
    "read_piqa",
]

Row = dict[str, Any]


class _Malformed(ValueError):
    """One line of a data file does not have the expected shape (internal; becomes a DataError)."""


def _text(raw: Mapping[str, Any], key: str) -> str:
    if key not in raw:
        raise _Malformed(f"missing field {key!r}")
    value = raw[key]
    if not isinstance(value, str):
        raise _Malformed(f"field {key!r} must be a string, got {type(value).__name__}")
    return value


def _piqa_row(raw: Mapping[str, Any], index: int) -> Row:
    # The label comes from the separate .lst file; load_piqa adds it.
    return {"goal": _text(raw, "goal"), "sol1": _text(raw, "sol1"), "sol2": _text(raw, "sol2")}


def _arc_row(raw: Mapping[str, Any], index: int) -> Row:
    # AI2 layout -> HF allenai/ai2_arc layout: question.stem -> question, choices[{text,label}] -> {text[],label[]}.
    question = raw.get("question")
    if not isinstance(question, Mapping):
        raise _Malformed("field 'question' must be an object with 'stem' and 'choices'")
    choices = question.get("choices")
    if not isinstance(choices, list) or not choices or not all(isinstance(c, Mapping) for c in choices):
        raise _Malformed("field 'question.choices' must be a non-empty list of {text, label} objects")
    texts = [_text(c, "text") for c in choices]
    labels = [_text(c, "label") for c in choices]
    answer = _text(raw, "answerKey")
    if answer not in labels:
        raise _Malformed(f"answerKey {answer!r} is not one of the choice labels {labels}")
    return {
        "id": str(raw.get("id", index)),
        "question": _text(question, "stem"),
        "choices": {"text": texts, "label": labels},
        "answerKey": answer,
    }


def _hellaswag_row(raw: Mapping[str, Any], index: int) -> Row:
    endings = raw.get("endings")
    if not isinstance(endings, list) or not endings or not all(isinstance(e, str) for e in endings):
        raise _Malformed("field 'endings' must be a non-empty list of strings")
    label = raw.get("label")
    # bool is an int subclass; "True" is not a valid label.
    if isinstance(label, bool) or not isinstance(label, (int, str)) or str(label) not in map(str, range(len(endings))):
        raise _Malformed(f"field 'label' must be an index into 'endings' (0..{len(endings) - 1}), got {label!r}")
    return {
        "ind": raw.get("ind", index),
        "activity_label": _text(raw, "activity_label"),
        "ctx_a": _text(raw, "ctx_a"),
        "ctx_b": _text(raw, "ctx_b"),
        "ctx": str(raw.get("ctx", "")),
        "endings": list(endings),
        "source_id": str(raw.get("source_id", "")),
        "split": str(raw.get("split", "")),
        "split_type": str(raw.get("split_type", "")),
        "label": str(label),  # Rowan/hellaswag stores the label as a string
    }


def _winogrande_row(raw: Mapping[str, Any], index: int) -> Row:
    sentence = _text(raw, "sentence")
    if "_" not in sentence:
        raise _Malformed("field 'sentence' has no '_' blank")
    answer = raw.get("answer")
    if isinstance(answer, bool) or str(answer) not in ("1", "2"):
        raise _Malformed(f"field 'answer' must be \"1\" or \"2\", got {answer!r}")
    return {
        "sentence": sentence,
        "option1": _text(raw, "option1"),
        "option2": _text(raw, "option2"),
        "answer": str(answer),
    }


def _boolq_row(raw: Mapping[str, Any], index: int) -> Row:
    answer = raw.get("answer")
    if not isinstance(answer, bool):
        raise _Malformed(f"field 'answer' must be true or false, got {answer!r}")
    # SuperGLUE's BoolQ (what lm-eval's boolq reads) prefixes each passage with its title and " -- ".
    return {
        "question": _text(raw, "question"),
        "passage": f"{_text(raw, 'title')} -- {_text(raw, 'passage')}",
        "idx": index,
        "label": int(answer),  # super_glue: 0 = False ("no"), 1 = True ("yes")
    }


@dataclass(frozen=True)
class Source:
    """Where one task's documents live under the data directory, and how to read them.

    Attributes:
        task: The task name (the same as lm-eval's built-in task).
        split: The split name the task's YAML evaluates.
        files: File role -> path relative to the data directory; ``docs`` is the JSON lines file.
        expected: The expected format, in words, for error messages.
        row: Turns one parsed JSON line and its 0-based index into a document in the hub layout.
    """

    task: str
    split: str
    files: Mapping[str, str]
    expected: str
    row: Callable[[Mapping[str, Any], int], Row]

    def error(self, path: str | Path, problem: str) -> DataError:
        """A DataError naming the task, the file, the problem and the expected format."""
        return DataError(f"{self.task}: {path} {problem} (expected {self.expected})")


_ARC_EXPECTED = "AI2 ARC JSON lines with id, question{stem, choices[{text, label}]} and answerKey"

SOURCES: dict[str, Source] = {
    s.task: s
    for s in (
        Source(
            "piqa",
            "validation",
            {"docs": "piqa/valid.jsonl", "labels": "piqa/valid-labels.lst"},
            "JSON lines with goal, sol1, sol2 and piqa/valid-labels.lst with one 0/1 label per line",
            _piqa_row,
        ),
        Source("arc_easy", "test", {"docs": "arc/ARC-Easy-Test.jsonl"}, _ARC_EXPECTED, _arc_row),
        Source("arc_challenge", "test", {"docs": "arc/ARC-Challenge-Test.jsonl"}, _ARC_EXPECTED, _arc_row),
        Source(
            "hellaswag",
            "validation",
            {"docs": "hellaswag/hellaswag_val.jsonl"},
            "JSON lines with activity_label, ctx_a, ctx_b, endings (a list of strings) and label (the index of "
            "the right ending)",
            _hellaswag_row,
        ),
        Source(
            "winogrande",
            "validation",
            {"docs": "winogrande/dev.jsonl"},
            'JSON lines with sentence (with one _ blank), option1, option2 and answer "1" or "2"',
            _winogrande_row,
        ),
        Source(
            "boolq",
            "validation",
            {"docs": "boolq/dev.jsonl"},
            "JSON lines with question, title, passage and answer (true or false)",
            _boolq_row,
        ),
    )
}


def _lines(source: Source, path: Path) -> Iterator[tuple[int, str]]:
    """(1-based line number, stripped text) of the non-blank lines of ``path``."""
    try:
        with path.open(encoding="utf-8") as fh:
            for number, line in enumerate(fh, start=1):
                if line.strip():
                    yield number, line.strip()
    except FileNotFoundError as e:
        raise source.error(path, "is missing") from e
    except IsADirectoryError as e:
        raise source.error(path, "is a directory, not a file") from e
    except UnicodeDecodeError as e:
        raise source.error(path, f"is not UTF-8 text ({e.reason})") from e


def read_docs(source: Source, path: Path, *, limit: int | None = None) -> list[Row]:
    """The documents in ``path`` (the first ``limit`` ones if given), in the hub layout.

    Raises:
        DataError: The file is missing, empty, not JSON lines, or a line lacks a field.
    """
    rows: list[Row] = []
    for number, line in _lines(source, path):
        if limit is not None and len(rows) >= limit:
            break
        try:
            raw = json.loads(line)
            if not isinstance(raw, dict):
                raise _Malformed(f"is a JSON {type(raw).__name__}, not an object")
            rows.append(source.row(raw, len(rows)))
        except (json.JSONDecodeError, _Malformed) as e:
            raise source.error(path, f"is malformed at line {number}: {e}") from e
    if not rows:
        raise source.error(path, "is empty")
    return rows


def read_labels(source: Source, path: Path) -> list[int]:
    """The 0/1 labels in a ``.lst`` file, one per non-blank line.

    Raises:
        DataError: The file is missing or a line is not 0 or 1.
    """
    labels: list[int] = []
    for number, line in _lines(source, path):
        if line not in ("0", "1"):
            raise source.error(path, f"is malformed at line {number}: {line[:40]!r} is not 0 or 1")
        labels.append(int(line))
    return labels


def read_piqa(source: Source, docs: Path, labels: Path) -> list[Row]:
    """PIQA documents with their labels merged in; the two files must have one line per item each."""
    rows = read_docs(source, docs)
    golds = read_labels(source, labels)
    if len(golds) != len(rows):
        raise source.error(labels, f"has {len(golds)} labels but {docs} has {len(rows)} items")
    return [{**row, "label": gold} for row, gold in zip(rows, golds)]


def _dataset(source: Source, rows: list[Row]) -> datasets.DatasetDict:
    import datasets

    return datasets.DatasetDict({source.split: datasets.Dataset.from_list(rows)})


def _load(task: str, data_files: Mapping[str, str]) -> datasets.DatasetDict:
    source = SOURCES[task]
    return _dataset(source, read_docs(source, Path(data_files["docs"])))


def load_piqa(data_files: Mapping[str, str], **_metadata: Any) -> datasets.DatasetDict:
    """``custom_dataset`` hook for piqa: ``data_files`` has ``docs`` and ``labels``."""
    source = SOURCES["piqa"]
    return _dataset(source, read_piqa(source, Path(data_files["docs"]), Path(data_files["labels"])))


def load_arc_easy(data_files: Mapping[str, str], **_metadata: Any) -> datasets.DatasetDict:
    """``custom_dataset`` hook for arc_easy."""
    return _load("arc_easy", data_files)


def load_arc_challenge(data_files: Mapping[str, str], **_metadata: Any) -> datasets.DatasetDict:
    """``custom_dataset`` hook for arc_challenge."""
    return _load("arc_challenge", data_files)


def load_hellaswag(data_files: Mapping[str, str], **_metadata: Any) -> datasets.DatasetDict:
    """``custom_dataset`` hook for hellaswag."""
    return _load("hellaswag", data_files)


def load_winogrande(data_files: Mapping[str, str], **_metadata: Any) -> datasets.DatasetDict:
    """``custom_dataset`` hook for winogrande."""
    return _load("winogrande", data_files)


def load_boolq(data_files: Mapping[str, str], **_metadata: Any) -> datasets.DatasetDict:
    """``custom_dataset`` hook for boolq."""
    return _load("boolq", data_files)
