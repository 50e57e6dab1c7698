"""Read the long-prompt pack (``<data>/longctx/*.jsonl``) into the documents of the ``longctx_*`` tasks.

Each file holds fixed, already formatted prompts of roughly 550-1,800 Gemma-3 tokens (see the README next to
the files): SQuAD, DROP and GSM8K 5-shot, CoQA 0-shot, QASPER yes/no 5-shot multiple choice. Every row is one
document; ``context`` is the prompt, byte for byte. Two tasks read each file with a gold ``continuation``: one
generates an answer (``longctx_squad``) and one scores the gold continuation's log-likelihood in bits per byte
(``longctx_squad_bpb``). The ``load_longctx_*`` functions are the YAMLs' ``custom_dataset`` hooks.

The stop sequences (``until``) are the same on every row of a file, and lm-eval's generation settings are per
task, so each generation YAML names them once; :data:`UNTIL` holds the same lists and every row must match
them (a row with other stop sequences is malformed rather than silently generated with the wrong ones).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from poptune.evaluate.tasks.loaders import Row, Source, _dataset, _Malformed, _text, read_docs

if TYPE_CHECKING:
    import datasets

__all__ = [
    "BPB_TASKS",
    "GENERATED_TASKS",
    "GENERATION_TASKS",
    "SOURCES",
    "UNTIL",
    "load_longctx_coqa",
    "load_longctx_drop",
    "load_longctx_gsm8k",
    "load_longctx_qasper",
    "load_longctx_squad",
]

#: Generation (and QASPER's multiple-choice) tasks, one per file; the ``longctx`` group.
GENERATION_TASKS: tuple[str, ...] = (
    "longctx_squad", "longctx_drop", "longctx_coqa", "longctx_gsm8k", "longctx_qasper",
)
#: The tasks of :data:`GENERATION_TASKS` whose answer is generated (QASPER's is the likelier of its choices).
GENERATED_TASKS: tuple[str, ...] = tuple(t for t in GENERATION_TASKS if t != "longctx_qasper")
#: The gold continuation's bits per byte, one per file with a continuation; the ``longctx_bpb`` group.
BPB_TASKS: tuple[str, ...] = ("longctx_squad_bpb", "longctx_drop_bpb", "longctx_coqa_bpb", "longctx_gsm8k_bpb")

#: Each file's stop sequences, as its rows give them (the generation YAMLs carry the same lists).
UNTIL: dict[str, list[str]] = {
    "squad": ["Title:", "\n\n"],
    "drop": ["Passage:", "Question:", "\n\n"],
    "coqa": ["\n\n"],
    "gsm8k": ["Question:", "</s>", "<|im_end|>", "\n\n"],
}


def _strings(raw: Mapping[str, Any], key: str) -> list[str]:
    value = raw.get(key)
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        problem = f"field {key!r} must be a non-empty list of strings" if key in raw else f"missing field {key!r}"
        raise _Malformed(problem)
    return list(value)


def _prompt(raw: Mapping[str, Any], file: str) -> Row:
    """``id``, ``context`` and ``continuation``; ``until`` must be the file's stop sequences."""
    if _strings(raw, "until") != UNTIL[file]:
        raise _Malformed(f"field 'until' must be {UNTIL[file]!r} for {file}, got {raw['until']!r}")
    context, continuation = _text(raw, "context"), _text(raw, "continuation")
    if not context or not continuation:
        raise _Malformed("fields 'context' and 'continuation' must be non-empty")
    return {"id": str(raw.get("id", "")), "context": context, "continuation": continuation}


def _squad_row(raw: Mapping[str, Any], index: int) -> Row:
    return {**_prompt(raw, "squad"), "answers": _strings(raw, "answers")}


def _coqa_row(raw: Mapping[str, Any], index: int) -> Row:
    return {**_prompt(raw, "coqa"), "answers": _strings(raw, "answers")}


def _gsm8k_row(raw: Mapping[str, Any], index: int) -> Row:
    return {**_prompt(raw, "gsm8k"), "answers": _strings(raw, "answers")}


def _drop_row(raw: Mapping[str, Any], index: int) -> Row:
    answers = raw.get("answers")
    if not isinstance(answers, list) or not answers or not all(
        isinstance(a, list) and a and all(isinstance(s, str) for s in a) for a in answers
    ):
        raise _Malformed(
            "field 'answers' must be a non-empty list of alternatives, each a non-empty list of strings"
            if "answers" in raw else "missing field 'answers'"
        )
    return {**_prompt(raw, "drop"), "answers": [list(a) for a in answers]}


def _qasper_row(raw: Mapping[str, Any], index: int) -> Row:
    choices = _strings(raw, "choices")
    label = raw.get("label")
    if isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < len(choices):
        raise _Malformed(f"field 'label' must be an index into 'choices' (0..{len(choices) - 1}), got {label!r}")
    context = _text(raw, "context")
    if not context:
        raise _Malformed("field 'context' must be non-empty")
    return {"id": str(raw.get("id", "")), "context": context, "choices": choices, "label": label}


def _expected(file: str, answers: str) -> str:
    return f"JSON lines with id, context, continuation, {answers} and until = {UNTIL[file]!r}"


_FILES = {
    "squad": (_squad_row, _expected("squad", "answers (a list of accepted answers)")),
    "drop": (_drop_row, _expected("drop", "answers (a list of alternatives, each a list of spans)")),
    "coqa": (_coqa_row, _expected("coqa", "answers (a list of accepted answers)")),
    "gsm8k": (_gsm8k_row, _expected("gsm8k", "answers ([the final number])")),
    "qasper": (_qasper_row, "JSON lines with id, context, choices (a list of strings) and label (the index of the "
                            "right choice)"),
}
_PATHS = {"squad": "squad", "drop": "drop", "coqa": "coqa", "gsm8k": "gsm8k", "qasper": "qasper_yesno"}


def _source(task: str, file: str) -> Source:
    row, expected = _FILES[file]
    return Source(task, "validation", {"docs": f"longctx/{_PATHS[file]}.jsonl"}, expected, row)


SOURCES: dict[str, Source] = {
    **{task: _source(task, task.removeprefix("longctx_")) for task in GENERATION_TASKS},
    **{task: _source(task, task.removeprefix("longctx_").removesuffix("_bpb")) for task in BPB_TASKS},
}


def _load(file: str, data_files: Mapping[str, str]) -> datasets.DatasetDict:
    source = SOURCES[f"longctx_{file}"]
    return _dataset(source, read_docs(source, Path(data_files["docs"])))


def load_longctx_squad(data_files: Mapping[str, str], **_metadata: Any) -> datasets.DatasetDict:
    """``custom_dataset`` hook for longctx_squad and longctx_squad_bpb."""
    return _load("squad", data_files)


def load_longctx_drop(data_files: Mapping[str, str], **_metadata: Any) -> datasets.DatasetDict:
    """``custom_dataset`` hook for longctx_drop and longctx_drop_bpb."""
    return _load("drop", data_files)


def load_longctx_coqa(data_files: Mapping[str, str], **_metadata: Any) -> datasets.DatasetDict:
    """``custom_dataset`` hook for longctx_coqa and longctx_coqa_bpb."""
    return _load("coqa", data_files)


def load_longctx_gsm8k(data_files: Mapping[str, str], **_metadata: Any) -> datasets.DatasetDict:
    """``custom_dataset`` hook for longctx_gsm8k and longctx_gsm8k_bpb."""
    return _load("gsm8k", data_files)


def load_longctx_qasper(data_files: Mapping[str, str], **_metadata: Any) -> datasets.DatasetDict:
    """``custom_dataset`` hook for longctx_qasper."""
    return _load("qasper", data_files)
