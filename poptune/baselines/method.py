"""The baseline contract (:class:`BaselineMethod`) and what a built baseline is (:class:`Baseline`).

A method is one module of ``poptune/baselines/`` and one line of its registry (:mod:`poptune.baselines.methods`):
it says how it is built at a ratio (:meth:`BaselineMethod.build`), which ratios it is measured at (its own, for
Wanda's sparsity), what identifies one built at a ratio, how many layers it can remove, and how a board labels it.
Nothing outside the package names a method (``tests/baselines/test_registry_homes.py`` scans for it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from poptune.engine import PopConfig
from poptune.errors import ConfigError
from poptune.transform import Transform

if TYPE_CHECKING:
    from torch import nn

    from poptune.kvfit.calibration import Calibration

__all__ = ["Baseline", "BaselineMethod", "Build", "check_ratio"]


@dataclass
class Baseline:
    """One baseline, ready to measure: ``with transform.applied(model)`` and POP ``pop`` (skip 0: none).

    Attributes:
        method: A name of :data:`poptune.baselines.methods.METHODS`.
        ratio: The pruning ratio asked for (Wanda: its sparsity).
        transform: The model change for prefill and decode, or None (``shortgpt-gen``).
        pop: The prefill-only configuration (``PopConfig(skip=0)`` for the static methods).
        details: Removed layers, removal order, scores, calibration: JSON-serialisable.
        percent: Labelled by its ratio in percent (a share of weights), not by the layers it removes.
    """

    method: str
    ratio: float
    transform: Transform | None
    pop: PopConfig = field(default_factory=lambda: PopConfig(skip=0))
    details: dict[str, Any] = field(default_factory=dict)
    percent: bool = False

    @property
    def label(self) -> str:
        if self.percent:
            return f"{self.method} {round(100 * self.ratio)}%"
        return f"{self.method} -{len(self.details['removed'])}"

    def describe(self) -> dict[str, Any]:
        return {"method": self.method, "ratio": self.ratio, "pop": self.pop.to_dict(), **self.details}


def check_ratio(ratio: float, name: str = "`ratio`") -> None:
    """A pruning ratio (or Wanda's sparsity) is a number in (0, 1)."""
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio < 1:
        raise ConfigError(f"{name} must be in (0, 1), got {ratio!r}")


@dataclass
class Build:
    """What a method is built from: the model, the ratio, ``k`` layers to remove (None for methods that remove no
    layers), the calibration (made on first use), ``progress`` and the ``memo`` several ratios share."""

    model: "nn.Module"
    tokenizer: Any
    ratio: float
    k: int | None
    calibration: Callable[[], "Calibration"]
    progress: Callable[[str], None] | None = None
    memo: dict[str, Any] = field(default_factory=dict)


class BaselineMethod:
    """The contract of a baseline method: one instance per method, in the registry.

    Attributes:
        name: The method's name (``--methods``, stored trials, boards).
        summary: One line: what it does.
        removes_layers: It removes ``k = round(ratio * L)`` layers for prefill and decode (a depth baseline).
        counts_layers: Its ratio is turned into ``k = round(ratio * L)`` layers (checked against :meth:`most`);
            else the ratio is a share of weights (checked to lie in (0, 1)).
        own_ratio: The one ratio it is measured at (Wanda's sparsity), None: the ratios asked.
        ratio_name: How its ratio is called in a message.
    """

    name: str = ""
    summary: str = ""
    removes_layers: bool = True
    counts_layers: bool = True
    own_ratio: float | None = None
    ratio_name: str = "`ratio`"

    def most(self, num_layers: int) -> int:
        """The most layers it can take from a model of ``num_layers`` (where it :attr:`counts_layers`)."""
        return num_layers - 1

    def ratios(self, asked: Sequence[float]) -> tuple[float, ...]:
        """The ratios it is measured at, given those ``asked``."""
        return (self.own_ratio,) if self.own_ratio is not None else tuple(asked)

    def amount(self, ratio: float, num_layers: int) -> float:
        """What identifies it built at ``ratio``: the layers it removes (a share's method: the share)."""
        return round(ratio, 4) if self.own_ratio is not None else round(ratio * num_layers)

    def build(self, build: Build) -> Baseline:
        raise NotImplementedError

    def label(self, details: Mapping[str, Any], num_layers: int) -> tuple[str, float]:
        """A board's label and ratio of what it built (``details``, as stored)."""
        removed = details.get("removed", [])
        return f"{len(removed)} removed: {','.join(map(str, removed))}", len(removed) / num_layers
