"""The options table: what the commands share, declared once.

- :data:`OPTIONS`: each option several commands take (``--model``, ``--device``, ``--dtype``, ``--weights``,
  ``--data-dir``, ``--kv``), one definition each, added by :func:`add_option` -- the same flags, type, default
  and help in every command.
- :func:`comma_list`: the one argparse type of every comma-separated option (``--lengths``, ``--tasks``,
  ``--kv``, ``--objectives``, ``--gpus``, ``--enqueue``, ``--baselines``, ``--pop``, ``--methods``, ...): its
  items, stripped, empty ones dropped. What each item must be is checked where the option is read -- by the
  library's own check where it has one (tasks, objectives, K/V sources, GPU indices, image sizes) -- so a bad item
  is one line, exit 2, worded as the library words it.
- :class:`LibraryDefault`: a default that is the library's (a dataclass field's default, a constant, a
  function's parameter's default), read only when needed -- help printed, or a command run
  (:func:`resolve_defaults`) -- so building the parser imports no module that loads torch.

Cross-field checks (one option needs or excludes another) are the specs' (their ``__post_init__`` or check
raising :class:`~poptune.errors.ConfigError`), not the command line's, wherever a spec holds both fields.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from poptune.device import DTYPES
from poptune.kv import registry as kv_registry
from poptune.problem.problem import TuningProblem

__all__ = ["OPTIONS", "LibraryDefault", "Option", "add_option", "comma_list", "default_of", "items",
           "resolve_defaults"]


def comma_list(text: str) -> tuple[str, ...]:
    """The argparse type of every comma-separated option: ``"a, b,,c"`` -> ``("a", "b", "c")``, ``""`` -> ``()``
    (which the option's reader refuses, or reads as none where none is a choice)."""
    return tuple(part.strip() for part in text.split(",") if part.strip())


def items(value: str | Iterable[str] | LibraryDefault | None) -> tuple[str, ...]:
    """A comma-separated option's items, whether parsed already (:func:`comma_list`), given as its text, or still
    its library default."""
    given: Any = value.value() if isinstance(value, LibraryDefault) else value
    if given is None:
        return ()
    return comma_list(given) if isinstance(given, str) else tuple(given)


def default_of(owner: Any, name: str) -> Any:
    """The library's default of ``name`` on ``owner``: a dataclass's field (its default, or what its default
    factory makes), a function's parameter, or an attribute (of a module, an instance, a class)."""
    if isinstance(owner, type) and dataclasses.is_dataclass(owner):
        found = next(f for f in dataclasses.fields(owner) if f.name == name)
        factory: Any = found.default_factory
        return found.default if found.default is not dataclasses.MISSING else factory()
    if inspect.isfunction(owner):
        return inspect.signature(owner).parameters[name].default
    return getattr(owner, name)


class LibraryDefault:
    """An option's default that is the library's, read when first needed: ``where`` is ``module:NAME.name...``
    (each step :func:`default_of` the one before), e.g. ``poptune.measure.benchrecord:BenchSpec.decode_tokens``
    or ``poptune.comparison.measure:compare.pairs``. It shows in help as its value (``%(default)s``)."""

    def __init__(self, where: str) -> None:
        self.where = where

    def value(self) -> Any:
        module, _, path = self.where.partition(":")
        found: Any = importlib.import_module(module)
        for name in path.split("."):
            found = default_of(found, name)
        return found

    def __str__(self) -> str:
        value = self.value()
        if isinstance(value, float):
            return format(value, "g")
        if isinstance(value, tuple):
            return ",".join(str(getattr(v, "label", v)) for v in value)  # a request profile: 2048+32
        return str(value)

    def __repr__(self) -> str:
        return f"LibraryDefault({self.where!r})"


def resolve_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` with every default still a :class:`LibraryDefault` replaced by its value (once a command runs)."""
    for name, value in vars(args).items():
        if isinstance(value, LibraryDefault):
            setattr(args, name, value.value())
    return args


@dataclass(frozen=True)
class Option:
    """One option of the table: its flags and what ``add_argument`` takes (``help`` may say ``%(default)s``)."""

    flags: tuple[str, ...]
    spec: Mapping[str, Any] = field(default_factory=dict)


def _kv_sources() -> str:
    """Every K/V source in one line of help: ``name`` (default) and what it keeps."""
    return "; ".join(f"`{s.name}`{' (default)' if kv_registry.is_default(s.name) else ''}: {s.help}"
                     for s in kv_registry.SOURCES)


#: The options several commands take, each declared once (:func:`add_option`).
OPTIONS: dict[str, Option] = {
    "--model": Option(("--model",), dict(default=default_of(TuningProblem, "model"),
                                         help="registered name or local directory (default: %(default)s)")),
    "--device": Option(("--device",), dict(default=default_of(TuningProblem, "device"),
                                           help="cpu, cuda or cuda:N (default: %(default)s)")),
    "--dtype": Option(("--dtype",), dict(choices=DTYPES, default=None,
                                         help="default: bfloat16 on CUDA and on a CPU with AMX (bfloat16 products in "
                                              "hardware), float32 on other CPUs")),
    "--weights": Option(("--weights",), dict(choices=("pretrained", "random"),
                                             default=default_of(TuningProblem, "weights"))),
    "--data-dir": Option(("--data-dir",), dict(
        metavar="DATA_DIR", help="the data directory: evaluation tasks, and WikiText-2 (wikitext-2/test.txt) for "
        "calibration text (default: $POPTUNE_DATA; neither: embedded tasks, text generated by the model)")),
    "--kv": Option(("--kv",), dict(
        type=comma_list, metavar="SOURCES", default=LibraryDefault("poptune.engine:PopConfig.kv"),
        help="the skipped layers' K/V sources for the pruned tokens, comma-separated (default: %(default)s): one "
             "configuration (bench, eval, generate) takes one; a search (study, grid) searches each, the default "
             "alone keeping the paper's space: " + _kv_sources())),
}


def add_option(parser: Any, flag: str, **overrides: Any) -> argparse.Action:
    """Add ``flag`` as :data:`OPTIONS` declares it to ``parser`` (or an argument group); ``overrides``: what a
    command says differently (a default, never the meaning)."""
    option = OPTIONS[flag]
    return parser.add_argument(*option.flags, **{**option.spec, **overrides})
