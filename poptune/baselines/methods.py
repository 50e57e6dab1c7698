"""The structured-pruning baselines POP is compared with, by name: the one place that lists them (a new method is one
module of ``poptune/baselines/`` and one line here), and :func:`build_baseline`, which builds one at a ratio.

=============== =====================================================================================================
``static-last``  remove the last k layers (prefill and decode) (:mod:`~poptune.baselines.static_last`)
``shortgpt``     remove the k layers of lowest Block Influence (:mod:`~poptune.baselines.shortgpt`)
``angular``      remove the contiguous block of k layers of least angular distance (:mod:`~poptune.baselines.angular`)
``sleb``         greedily remove the layer that raises calibration perplexity least (:mod:`~poptune.baselines.sleb`)
``laco``         layer collapse by parameter differences (:mod:`~poptune.baselines.laco`)
``shortgpt-gen`` ShortGPT's prefill-only variant (:mod:`~poptune.baselines.shortgpt_gen`)
``width``        width pruning of every MLP's channels (:mod:`~poptune.baselines.width`)
``wanda``        unstructured Wanda at 30% of the weights (:mod:`~poptune.baselines.wanda`)
=============== =====================================================================================================

k = round(ratio * L). Every method returns a :class:`~poptune.baselines.method.Baseline`: a reversible model transform
and/or a POP configuration, plus the details (removal order, scores, calibration amount, source and seed) stored with
it. Everything that needs a method -- the command line's ``--methods``, a study's baseline trials, the comparison, the
leaderboard's labels -- asks :func:`method` or reads :data:`METHODS`; a test
(``tests/baselines/test_registry_homes.py``) finds no method named anywhere else in the package.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from poptune.baselines import angular, laco, shortgpt, shortgpt_gen, sleb, static_last, wanda, width
from poptune.baselines.method import Baseline, BaselineMethod, Build, check_ratio
from poptune.engine import decoder_of
from poptune.errors import ConfigError
from poptune.kvfit.calibration import Calibration, CalibrationSpec, calibration

if TYPE_CHECKING:
    from torch import nn

__all__ = ["BASELINES", "DEPTH_METHODS", "METHODS", "WANDA_SPARSITY", "Baseline", "build_baseline", "check_ratio",
           "layer_count", "method"]

#: Every method, in the order boards and ``all`` list them.
BASELINES: tuple[BaselineMethod, ...] = (
    static_last.METHOD,
    shortgpt.METHOD,
    angular.METHOD,
    sleb.METHOD,
    laco.METHOD,
    shortgpt_gen.METHOD,
    width.METHOD,
    wanda.METHOD,
)

#: Their names, in that order.
METHODS: tuple[str, ...] = tuple(m.name for m in BASELINES)

#: The methods that remove layers for prefill and decode: POP's "depth baselines".
DEPTH_METHODS: tuple[str, ...] = tuple(m.name for m in BASELINES if m.removes_layers)

#: The sparsity the POP paper uses for its Wanda reference (the public API's name).
WANDA_SPARSITY = wanda.WANDA_SPARSITY


def method(name: str, *, what: str = "baseline") -> BaselineMethod:
    """The method called ``name``, or :class:`ConfigError` naming them all."""
    for known in BASELINES:
        if known.name == name:
            return known
    raise ConfigError(f"unknown {what} {name!r}: use one of {', '.join(m.name for m in BASELINES)}")


def layer_count(ratio: float, num_layers: int, method_name: str = shortgpt.METHOD.name) -> int:
    """k = round(ratio * L), checked against what the method called ``method_name`` can remove."""
    check_ratio(ratio)
    k = round(ratio * num_layers)
    most = method(method_name).most(num_layers)
    if not 1 <= k <= most:
        raise ConfigError(f"ratio {ratio} removes {k} of {num_layers} layers; {method_name} can remove 1 to {most}")
    return k


def build_baseline(model: "nn.Module", tokenizer: Any, method_name: str, ratio: float,
                   spec: CalibrationSpec | None = None, *,
                   progress: Callable[[str], None] | None = None, memo: dict[str, Any] | None = None) -> Baseline:
    """Build the method called ``method_name`` at ``ratio`` (Wanda: ``ratio`` is its sparsity) for ``model``.

    ``memo`` (one dict per model and calibration) lets several ratios share work: SLEB's greedy order for k
    layers is the prefix of its order for more, so the longest order computed so far is reused.

    Raises:
        ConfigError: an unknown method or a ratio out of range.
        DataError: a calibration data directory without WikiText-2.
    """
    chosen = method(method_name)
    if chosen.counts_layers:
        k: int | None = layer_count(ratio, len(decoder_of(model).layers), chosen.name)
    else:
        check_ratio(ratio, chosen.ratio_name)
        k = None
    made: list[Calibration] = []

    def calibrated() -> Calibration:
        if not made:
            made.append(calibration(model, tokenizer, spec or CalibrationSpec()))
        return made[0]

    build = Build(model, tokenizer, ratio, k, calibrated, progress, {} if memo is None else memo)
    return chosen.build(build)
