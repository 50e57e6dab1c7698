"""lm-eval's ``--model_args`` for the ``poptune`` model, read without lm-eval.

:class:`~poptune.evaluate.lm.PopLM` takes its configuration from them (:func:`pop_config`), and the lm-eval route
(:mod:`poptune.evaluate.harness`) checks them before lm-eval starts (:func:`check_model_args`): lm-eval indexes
its tasks before it builds the model, about 20 s on a 2-core CPU, so an unknown model or a bad configuration
would otherwise be refused only after that wait. :func:`option_values` reads an option as lm-eval's parser does (the
route's task-name check reads ``--tasks`` with it).
"""

from __future__ import annotations

from typing import Any

from poptune.boundary import registry as boundary_registry
from poptune.engine import PopConfig
from poptune.kv import registry

__all__ = ["check_model_args", "option_values", "pop_config"]


def pop_config(skip: Any = 0, boundary: Any = boundary_registry.DEFAULT, offset: Any = 0, layers: Any = None,
               kv: Any = registry.DEFAULT) -> PopConfig:
    """The configuration of ``--model_args`` values (strings there; lm-eval splits on commas, so layers are
    dash-separated: ``layers=3-5-9``), read by :meth:`PopConfig.from_fields`, or a one-line ConfigError."""
    return PopConfig.from_fields(skip, boundary, offset, layers, kv, who="PopLM")


def option_values(argv: list[str], names: tuple[str, ...]) -> list[str]:
    """The values given to the option ``names`` in ``argv``, every time it is given: ``--name V [V ...]`` (up to
    the next option) or ``--name=V``, as lm-eval's parser reads them."""
    found: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in names:
            i += 1
            while i < len(argv) and not argv[i].startswith("-"):
                found.append(argv[i])
                i += 1
            continue
        if any(arg.startswith(name + "=") for name in names):
            found.append(arg.split("=", 1)[1])
        i += 1
    return found


def _parsed(tokens: list[str]) -> dict[str, str] | None:
    """``k=v,k=v`` tokens (lm-eval's plain form, later keys winning) as one dict; None for anything else (a JSON
    object: lm-eval reads it)."""
    values: dict[str, str] = {}
    for token in tokens:
        if token.lstrip().startswith("{"):
            return None
        pairs = [p for p in token.split(",") if p.strip()]
        if not all("=" in p for p in pairs):
            return None
        values.update((k.strip(), v.strip()) for k, v in (p.split("=", 1) for p in pairs))
    return values


def check_model_args(argv: list[str]) -> None:
    """Refuse a ``poptune`` model's bad ``--model_args`` in ``argv`` at once: an unknown model name (a local
    directory passes) and a configuration that cannot be built. What needs the model (its layer count, a K/V
    source's maps) is checked when lm-eval builds it; other models and forms pass untouched.

    Raises:
        PoptuneError: the one-line reason (a ConfigError, or a ModelNotFoundError).
    """
    models = option_values(argv, ("--model", "-M"))
    if not models or models[-1] != "poptune":
        return
    values = _parsed(option_values(argv, ("--model_args", "-a")))
    if values is None:
        return
    fields = {k: values[k] for k in ("skip", "boundary", "offset", "layers", "kv") if k in values}
    pop_config(**fields)
    if "pretrained" in values:
        from poptune.models import resolve_model

        resolve_model(values["pretrained"])
