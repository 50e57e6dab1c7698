"""Offline lm-eval task pack: the built-in zero-shot tasks and the long-prompt tasks, reading local files.

The six short tasks (:data:`SHORT_TASKS`) have lm-eval's built-in names, prompts, choices, targets and metrics.
The long-prompt tasks (:data:`LONG_TASKS`, group ``longctx``; :data:`LONG_BPB_TASKS`, group ``longctx_bpb``) read
``<data>/longctx/*.jsonl`` (``poptune/evaluate/tasks/longctx.py``); their names start with ``longctx_``, which
no built-in lm-eval task uses. Documents come from a data directory with the layout of ``/work/shared/data``
(see ``poptune/evaluate/tasks/loaders.py``). The YAML templates in ``poptune/evaluate/tasks/`` get the data
directory's absolute file paths filled in and are written to a temporary directory. A ``TaskManager``
indexes only that directory (``include_defaults=False``), so the names do not clash with the built-in tasks,
results come back under the plain names, and the roughly 13 s it takes to index every built-in YAML is skipped.

Example:
    >>> task_dict = get_task_dict(["piqa", "arc_easy"], data_dir("/work/shared/data"))
    >>> lm_eval.evaluator.evaluate(lm, task_dict)["results"]["piqa"]["acc,none"]
    >>> task_dict["tasks"]["piqa"].eval_docs  # lm-eval Task objects, by plain name
"""

from __future__ import annotations

import contextlib
import difflib
import json
import logging
import os
import shutil
import string
import tempfile
import weakref
from collections.abc import Iterator, Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from poptune.data import ENV_VAR, data_dir
from poptune.errors import ConfigError, DataError
from poptune.evaluate.tasks import registry
from poptune.evaluate.tasks.loaders import read_docs, read_piqa

if TYPE_CHECKING:
    from lm_eval.tasks import TaskManager
    from lm_eval.tasks.manager import TaskDict

__all__ = [
    "ENV_VAR", "GROUPS", "LONG_BPB_TASKS", "LONG_TASKS", "SHORT_TASKS", "TASKS", "check_data", "data_dir", "expand",
    "get_task_dict", "task_manager",
]

#: lm-eval's short zero-shot multiple-choice tasks, under their built-in names (the pack's tasks of no group).
SHORT_TASKS: tuple[str, ...] = tuple(t.name for t in registry.PACK if t.group is None)
#: Long real prompts, scored by generation (QASPER: multiple choice) with each task's own metric.
LONG_TASKS: tuple[str, ...] = registry.GROUPS["longctx"]
#: The same long prompts, scored by the gold continuation's bits per byte (lower is better).
LONG_BPB_TASKS: tuple[str, ...] = registry.GROUPS["longctx_bpb"]
#: Every task of the pack (:mod:`poptune.evaluate.tasks.registry`).
TASKS: tuple[str, ...] = registry.NAMES
#: Group names that stand for several tasks.
GROUPS: dict[str, tuple[str, ...]] = registry.GROUPS

SOURCES = {t.name: t.source for t in registry.PACK}

# check_data parses this many documents per file; the loaders parse every line when lm-eval builds the task.
_CHECK_LINES = 5

assert set(TASKS) == set(SOURCES), "every task needs a loader and a template"


def expand(tasks: Sequence[str]) -> tuple[str, ...]:
    """Task names with each group of :data:`GROUPS` replaced by its tasks, duplicates dropped, order kept."""
    names: list[str] = []
    for task in tasks:
        names.extend(GROUPS.get(task, (task,)))
    return tuple(dict.fromkeys(names))


def _unknown(tasks: Sequence[str]) -> None:
    for task in tasks:
        if task not in SOURCES:
            hint = difflib.get_close_matches(task, (*TASKS, *GROUPS), n=1)
            did_you_mean = f"; did you mean {hint[0]!r}?" if hint else ""
            raise ConfigError(
                f"task {task!r} is not in the offline task pack ({', '.join(TASKS)}; groups "
                f"{', '.join(GROUPS)}){did_you_mean}"
            )


def check_data(data_dir: str | os.PathLike[str], tasks: Sequence[str] = TASKS) -> None:
    """Check cheaply that ``data_dir`` holds the files of ``tasks`` in the expected formats.

    Every file must exist; the first few documents of each JSON lines file must parse and have the fields
    the task needs; PIQA's label file must have one 0/1 label per document. The loaders check every line when
    the tasks are built.

    Raises:
        ConfigError: A task is not in :data:`TASKS`.
        DataError: A file is missing or malformed; the message names the file and the expected format.
    """
    _unknown(tasks)
    root = Path(data_dir)
    if root.exists() and not root.is_dir():
        raise DataError(f"data directory {root} is not a folder (--data-dir or ${ENV_VAR} must name the evaluation "
                        "data folder, the layout of /work/shared/data)")
    if not root.is_dir():
        raise DataError(f"data directory {root} does not exist (expected the layout of /work/shared/data)")
    for task in dict.fromkeys(tasks):
        source = SOURCES[task]
        paths = {role: root / rel for role, rel in source.files.items()}
        for path in paths.values():
            if not path.is_file():
                raise source.error(path, "is missing")
        if task == "piqa":
            read_piqa(source, paths["docs"], paths["labels"])  # 1838 short lines: a few milliseconds
        else:
            read_docs(source, paths["docs"], limit=_CHECK_LINES)


def render_tasks(data_dir: Path, out: Path) -> None:
    """Write every template with ``data_files`` filled in with absolute paths under ``data_dir``, and one lm-eval
    group YAML per entry of :data:`GROUPS` (so lm-eval's command line knows ``--tasks longctx`` too)."""
    templates = resources.files("poptune.evaluate.tasks")
    for task, source in SOURCES.items():
        files = {role: str(data_dir / rel) for role, rel in source.files.items()}
        # A JSON object is a YAML flow mapping; ensure_ascii=False keeps non-ASCII paths out of \u escapes.
        text = string.Template(templates.joinpath(f"{task}.yaml").read_text(encoding="utf-8"))
        (out / f"{task}.yaml").write_text(
            text.substitute(data_files=json.dumps(files, ensure_ascii=False)), encoding="utf-8"
        )
    for group, tasks in GROUPS.items():
        (out / f"{group}.yaml").write_text(json.dumps({"group": group, "task": list(tasks)}), encoding="utf-8")


def task_manager(data_dir: str | os.PathLike[str] | None) -> TaskManager:
    """An lm-eval ``TaskManager`` whose tasks read ``data_dir``, or the plain one when it is None.

    With a data directory, the manager knows only the tasks of :data:`TASKS`. Their rendered YAMLs live
    in a temporary directory that is removed when the manager is garbage-collected.
    """
    from lm_eval.tasks import TaskManager

    if data_dir is None:
        return TaskManager()
    rendered = Path(tempfile.mkdtemp(prefix="poptune-tasks-"))
    try:
        render_tasks(Path(data_dir).expanduser().resolve(), rendered)
        manager = TaskManager(include_path=str(rendered), include_defaults=False)
    except BaseException:
        shutil.rmtree(rendered, ignore_errors=True)
        raise
    weakref.finalize(manager, shutil.rmtree, rendered, ignore_errors=True)
    return manager


class _DropCustomDatasetHint(logging.Filter):
    """Drops lm-eval's hint about `--metadata`, logged for every task with a custom_dataset hook."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Custom kwargs can be passed" not in record.getMessage()


@contextlib.contextmanager
def _quiet_custom_dataset_hint() -> Iterator[None]:
    logger = logging.getLogger("lm_eval.api.task")
    hint_filter = _DropCustomDatasetHint()
    logger.addFilter(hint_filter)
    try:
        yield
    finally:
        logger.removeFilter(hint_filter)


def get_task_dict(tasks: Sequence[str], data_dir: str | os.PathLike[str] | None) -> TaskDict:
    """lm-eval tasks by name, ready for ``lm_eval.evaluator.evaluate(lm, task_dict)``.

    This is ``TaskManager.load()``'s result, lm-eval's current form (``lm_eval.tasks.get_task_dict`` is
    deprecated): ``{"tasks": {name: Task}, "groups": {...}, "group_map": {...}}``.

    Args:
        tasks: Task names. With a data directory they must be in :data:`TASKS` or :data:`GROUPS` (a group
            stands for its tasks, see :func:`expand`); without one, any built-in
            lm-eval task or group name works (its data comes from the dataset hub or the local HF cache).
        data_dir: The offline data directory, or None for lm-eval's built-in tasks.

    Returns:
        The task dict; ``["tasks"]`` is keyed by the plain task names.

    Raises:
        ConfigError: A task is not in the offline pack (with a data directory).
        DataError: A data file is missing or malformed.
    """
    if data_dir is None:
        return task_manager(None).load(list(tasks))
    names = list(expand(tasks))
    check_data(data_dir, names)
    manager = task_manager(data_dir)
    with _quiet_custom_dataset_hint():
        return manager.load(names)
