"""What a methods comparison record must hold before the leaderboard reads it (issue 57).

``poptune leaderboard --records DIR`` reads every ``methods-*.json`` in a folder; a file of that name that is not
JSON, nests deeper than a reader can follow, or lacks (or mistypes) a field the board reads is refused in one
line naming the file and the field, never a traceback from deep inside the board.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from poptune.errors import ConfigError

__all__ = ["check_record"]


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _count(value: Any, least: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _series(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(_number(v) and v > 0 for v in value)


def _check_timing(timing: Any, name: str) -> str | None:
    """What is wrong with one method's timing (None: nothing)."""
    if timing is None:
        return None
    if not isinstance(timing, dict):
        return f"method {name!r}: `timing` must be an object"
    for profile, kinds in timing.items():
        for kind in ("ttft_ms", "tpot_ms"):
            pair = kinds.get(kind) if isinstance(kinds, dict) else None
            if not (isinstance(pair, dict) and _series(pair.get("a")) and _series(pair.get("b"))
                    and len(pair["a"]) == len(pair["b"])):
                return f"method {name!r}: `timing.{profile}.{kind}` must hold paired positive times `a` and `b`"
    return None


def _check_method(entry: Any, index: int, tasks: list[str]) -> str | None:
    if not isinstance(entry, dict):
        return f"`methods[{index}]` must be an object"
    for key in ("name", "method", "label"):
        if not isinstance(entry.get(key), str):
            return f"`methods[{index}].{key}` must be a string"
    name: str = entry["name"]
    if not _number(entry.get("ratio")):
        return f"method {name!r}: `ratio` must be a finite number"
    if "score_seconds" in entry and not _number(entry["score_seconds"]):
        return f"method {name!r}: `score_seconds` must be a finite number"
    outcomes = entry.get("outcomes", {} if not tasks else None)  # a timings-only record scores nothing
    if not isinstance(outcomes, dict) or sorted(outcomes) != sorted(tasks):
        return f"method {name!r}: `outcomes` must hold a list per task of `tasks` ({', '.join(tasks)})"
    if not all(isinstance(v, list) and v and all(_number(x) for x in v) for v in outcomes.values()):
        return f"method {name!r}: each task's `outcomes` must be a non-empty list of finite scores"
    items = entry.get("items")  # the items scored, per task (issue 87: another count than the scores passed)
    if items is not None and not (isinstance(items, dict) and sorted(items) == sorted(outcomes) and all(
            isinstance(items[t], list) and len(items[t]) == len(outcomes[t]) for t in outcomes)):
        return f"method {name!r}: `items` must name, per task, one item for each score of `outcomes`"
    return _check_timing(entry.get("timing"), name)


def _check_head(record: Mapping[str, Any]) -> str | None:
    for key in ("model", "workload"):
        if not isinstance(record.get(key), str) or not record[key]:
            return f"`{key}` must be a non-empty string"
    hardware = record.get("hardware")
    if not isinstance(hardware, dict) or not isinstance(hardware.get("hardware_id"), str):
        return "`hardware.hardware_id` must be a string"
    tasks = record.get("tasks")
    if not isinstance(tasks, list) or not all(isinstance(t, str) for t in tasks) or len(set(tasks)) != len(tasks):
        return "`tasks` must be a list of distinct task names"
    if not _count(record.get("num_layers"), 1):  # issue 87: 0 was read
        return "`num_layers` must be an integer >= 1"
    if not _count(record.get("per_task")) or ("skip" in record and not _count(record["skip"])):
        return "`per_task` and `skip` must be integers >= 0"
    profiles = record.get("profiles")
    if not isinstance(profiles, list) or not all(
            isinstance(p, list) and len(p) == 2 and all(_count(x, 1) for x in p) for p in profiles):
        return "`profiles` must be a list of [prompt, output] token counts >= 1"
    if not (_count(record.get("pairs"), 1) and _count(record.get("decode_steps"), 1)):  # provenance says them
        return "`pairs` and `decode_steps` must be integers >= 1"
    for key in ("command", "date"):
        if key in record and not isinstance(record[key], str):
            return f"`{key}` must be a string"
    if "versions" in record and not isinstance(record["versions"], dict):
        return "`versions` must be an object"
    return None


def check_record(record: Any, path: Any) -> None:
    """Refuse ``record`` (read from ``path``) unless it holds what the board reads, in the types it reads.

    Raises:
        ConfigError: one line naming the file and the first field found wrong.
    """
    problem = _check_head(record)
    methods = record.get("methods")
    if problem is None and (not isinstance(methods, list) or not methods):
        problem = "`methods` must be a non-empty list"
    tasks = record.get("tasks") if problem is None else []
    for index, entry in enumerate(methods if problem is None else []):
        problem = _check_method(entry, index, tasks)
        if problem:
            break
    if problem is None:
        names = [e["name"] for e in methods]
        if len(set(names)) != len(names):
            problem = "`methods` must have distinct names"
        elif not any(e["method"] == "full" for e in methods):
            problem = "`methods` must hold the full model's outcomes (method `full`)"
        elif len({tuple(len(e.get("outcomes", {})[t]) for t in tasks) for e in methods}) != 1:
            problem = "every method must be scored on the same items (the same count per task)"
    if problem is not None:
        raise ConfigError(f"{path} is not a valid methods comparison record: {problem}")
