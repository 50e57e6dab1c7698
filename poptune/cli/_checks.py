"""Every argument checked before any work: the number types of every command's flags, and :func:`check_args`.

A number flag takes one of four kinds, the same kind for the same flag in every command: a finite float
(:func:`finite`), an integer (:func:`positive` for >= 1, :func:`count` where the spec checks the lower bound; every
integer flag at most :data:`COUNT_MAX` in size), a seed (``_args.seed``) or an accuracy budget in points or ``none``
(:func:`budget`). NaN and infinity are refused where a number is parsed, so no command reads them
as "no limit". :func:`check_args` then checks what needs the arguments together -- prompt lengths against the
model's context, read from its configuration without loading it; a data directory that is a directory -- before
the command starts, so a refusal takes moments, not the minutes of building items or loading a model.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from poptune.cli._options import LibraryDefault, items
from poptune.errors import ConfigError

__all__ = ["BENCH_LENGTHS", "COUNT_MAX", "budget", "check_args", "count", "finite", "int_list", "positive"]

#: ``bench``'s prompt lengths when neither ``--lengths`` nor ``--image`` is given: the library's.
BENCH_LENGTHS = LibraryDefault("poptune.measure.benchrecord:BenchSpec.lengths")


def finite(text: str) -> float:
    """An argparse type: a finite number (``nan``, ``inf`` and numbers past the float range are refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


#: The largest count any flag takes (items, pairs, trials, tokens, steps): past it a value is a typo, never a plan,
#: and refusing it at once beats starting work that cannot finish (issue 57).
COUNT_MAX = 1_000_000


def _at_least(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}, got {text!r}") from None
    if not minimum <= value <= COUNT_MAX:
        raise argparse.ArgumentTypeError(f"must be an integer in [{minimum:,}, {COUNT_MAX:,}], got {value}")
    return value


def count(text: str) -> int:
    """An argparse type: an integer within +- :data:`COUNT_MAX` (its lower bound is the spec's to check)."""
    return _at_least(text, -COUNT_MAX)


def pairs_cap(text: str) -> int:
    """An argparse type: the most timing pairs of a measurement, at least
    :data:`~poptune.measure.stats.MIN_JUDGED` (fewer leave the noise checks nothing to judge: a speedup far past
    its FLOPs ideal went unflagged, issue 87)."""
    from poptune.measure.stats import MIN_JUDGED

    value = count(text)
    if value < MIN_JUDGED:
        raise argparse.ArgumentTypeError(f"must be >= {MIN_JUDGED} (the noise checks judge {MIN_JUDGED} pairs and "
                                         f"more), got {value}")
    return value


def positive(text: str) -> int:
    """An argparse type: an integer >= 1."""
    return _at_least(text, 1)


def non_negative(text: str) -> int:
    """An argparse type: an integer >= 0."""
    return _at_least(text, 0)


def budget(text: str) -> float | None:
    """An argparse type: an accuracy budget, finite points >= 0, or ``none`` for no budget."""
    if text.strip().lower() == "none":
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected accuracy points >= 0 or `none`, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected accuracy points >= 0 (finite) or `none`, got {text!r}")
    return value


def int_list(value: str | Iterable[str], option: str) -> list[int]:
    """``"128,512"`` (or its items, :func:`~poptune.cli._options.comma_list`) -> ``[128, 512]``, or a one-line
    ConfigError naming the option."""
    parts = items(value)
    try:
        values = [int(part) for part in parts]
    except ValueError as e:
        raise ConfigError(f"`{option}` must be comma-separated integers, got {','.join(parts)!r}") from e
    if not values:
        raise ConfigError(f"`{option}` must name at least one value")
    twice = sorted({v for v in values if values.count(v) > 1})
    if twice:
        raise ConfigError(f"`{option}` names {', '.join(map(str, twice))} more than once: give each value once")
    return values


def check_args(args: argparse.Namespace) -> None:
    """Refuse, before the command starts, what its arguments make impossible together.

    Raises:
        ConfigError: prompt lengths the model cannot hold, a data directory that is not a directory.
        ModelNotFoundError: an unknown model, where the lengths are checked against it.
    """
    _check_empty(args)
    _check_data_dir(getattr(args, "data_dir", None))
    _check_prompts(args)
    _check_lengths(args)


#: The options naming a file, folder, storage or study: given as empty text, each was read as its default
#: (``--out ""``: ``pareto`` and ``export`` printed to stdout, ``leaderboard`` wrote into the current folder).
_NAMED = ("out", "storage", "study", "config", "prompts", "records", "grid", "data_dir", "init_from_importance",
          "model", "device", "prompt")


def _check_empty(args: argparse.Namespace) -> None:
    """No file, folder, storage or study option (:data:`_NAMED`) given as empty text."""
    for name in _NAMED:
        value = getattr(args, name, None)
        if isinstance(value, str) and not value.strip():
            raise ConfigError(f"`--{name.replace('_', '-')}` must not be empty")


def _check_prompts(args: argparse.Namespace) -> None:
    """A prompts file read and checked line by line, then against the model's context with its tokenizer alone
    (where one is at hand without building anything): a file none of whose prompts fits is refused now."""
    path = getattr(args, "prompts", None)
    judge = getattr(args, "judge", None)
    if path is None:
        if judge is not None and not (judge == "likelihood" and hasattr(args, "tasks")):
            raise ConfigError(f"`--judge {judge}` goes with `--prompts FILE` (it judges the answers to its prompts)"
                              + ("; on --tasks only `--judge likelihood` is another judge than accuracy"
                                 if hasattr(args, "tasks") else ""))
        return  # --store-prompts without --prompts: the problem's check (TuningProblem)
    from poptune.evaluate.prompts import check_fit, read_prompts
    from poptune.models import load_tokenizer, max_positions

    requests = read_prompts(path)
    if judge == "references" and all(r.answer is None for r in requests):
        raise ConfigError(f"`--judge references`: `--prompts` {path} has no request with an `answer`")
    for option in ("tasks", "lengths", "image"):  # the prompts are the items, and their lengths are timed
        if getattr(args, option, None) is not None:
            raise ConfigError(f"give `--prompts` (your own prompts) or `--{option}`, not both")
    tokenizer = load_tokenizer(args.model, getattr(args, "weights", "pretrained"))
    if tokenizer is not None:
        check_fit(tokenizer, requests, max_positions(args.model, getattr(args, "weights", "pretrained")), path)


def _check_data_dir(text: str | None) -> None:
    if text is None:
        return
    path = Path(text).expanduser()
    if path.exists() and not path.is_dir():
        raise ConfigError(f"`--data-dir` {text} is a file, not a directory (the evaluation data directory)")
    if not path.exists():
        raise ConfigError(f"`--data-dir` {text} does not exist (expected the layout of /work/shared/data)")


def _check_lengths(args: argparse.Namespace) -> None:
    """``--lengths`` against the model's context: bench's prompts plus their decode tokens, a study's synthetic
    prompts plus the room a generation needs (:data:`poptune.evaluate.workload.GENERATION_ROOM`)."""
    if getattr(args, "image", None) is not None or not hasattr(args, "lengths") or not hasattr(args, "model"):
        return
    from poptune.models import max_positions

    given = args.lengths if args.lengths is not None else _default_lengths(args)
    if given is None:
        return
    lengths = int_list(given, "--lengths")
    limit = max_positions(args.model, getattr(args, "weights", "pretrained"))
    if limit is None:
        return
    if args.command == "bench":
        room, why = getattr(args, "decode_tokens", 0) or 0, "with its decode tokens"
    else:
        from poptune.evaluate.workload import GENERATION_ROOM

        room, why = GENERATION_ROOM, "with room for an answer"
    too_long = [n for n in lengths if n + room > limit]
    if too_long:
        raise ConfigError(f"prompt lengths {too_long} exceed this model's {limit} positions ({why}: at most "
                          f"{limit - room} tokens)")


def _default_lengths(args: argparse.Namespace) -> Any:
    return tuple(map(str, BENCH_LENGTHS.value())) if args.command == "bench" else None
