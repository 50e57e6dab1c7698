"""The K/V source contract: where the pruned tokens' K/V in POP's skipped block come from.

In POP's skipped block the pruned tokens run no layer, yet decode attends to every layer's K/V of the prompt. A
*K/V source* says what the skipped layers keep for those tokens. Each source is one module of this package, a
:class:`KVSource`, and one line of :mod:`poptune.kv.registry`; everything else -- the engine, the tuner's
search space, the command line, the lm-eval model, exports, reports -- asks the registry, never a source's name.

What a source says:

- **who it is**: :attr:`~KVSource.name` (what ``PopConfig.kv``, ``--kv`` and stored configurations hold),
  :attr:`~KVSource.label` (how reports and leaderboards name it), :attr:`~KVSource.tag` (in file names),
  :attr:`~KVSource.help` (one line of ``--kv``'s help);
- **which configurations it can run** (:meth:`~KVSource.check`) and from how many skipped layers on it differs
  from the default (:attr:`~KVSource.min_skip`: the tuner's search space does not search it below);
- **how a skipped layer writes the pruned tokens' K/V** in one prefill segment (:meth:`~KVSource.writer`; how
  many it keeps, :meth:`~KVSource.kept`, for the FLOPs ideal), and whether the loaded model is ready to run it
  (:meth:`~KVSource.ready`);
- **how a loaded model is prepared** for it, once (:meth:`~KVSource.prepare`: the calibrated source loads or
  fits maps), and what a measurement stores about that (:meth:`~KVSource.details`);
- **what an exported configuration carries** (:attr:`~KVSource.export_key`, :attr:`~KVSource.export_suffix`,
  :meth:`~KVSource.load_export`), and what a study's summary says of it (:meth:`~KVSource.report_lines`).

This package sits at the bottom of the engine's floor: it imports neither the engine nor the block, which
import it. Work that needs the engine -- fitting calibrated maps runs POP prefills to check them -- lives a floor
up (:mod:`poptune.kvfit`) and reaches a source's :meth:`~KVSource.prepare` through its :class:`Preparation`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from poptune.errors import ConfigError

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = ["COMPACT_FLAG", "KVSource", "Preparation", "Segment", "Write", "block_of"]

#: ``write(layer, hidden_states, position_embeddings, cache)``: one skipped layer's pruned tokens' K/V into the
#: cache; ``hidden_states`` (B, P, C) is the block-entry state of the P pruned tokens.
Write = Callable[["nn.Module", "torch.Tensor", Any, Any], None]


#: Set on a cache once one of its layers keeps only some of its tokens (:mod:`poptune.kv.compact`): read on every
#: forward under POP, so that a cache without such a layer costs one attribute lookup.
COMPACT_FLAG = "_poptune_compact"


@dataclass
class Segment:
    """One prefill segment through the skipped block, as a writer sees it.

    Attributes:
        pruned: Tokens of the segment that skip the block (its first ``pruned``).
        mask: The segment's 2-D attention mask (B, past + N), left-padded, or None (no padding).
        length: Its tokens, ``N``.
        pads: The most pads a row of the segment starts with, known on the host (0: none); None: unknown.
    """

    pruned: int
    mask: Any = None
    length: int = 0
    pads: int | None = 0

    @functools.cached_property
    def first(self) -> "torch.Tensor | None":
        """(B,): each row's first real token in the segment, on the device (no host sync), computed once when a
        source asks; None without a 2-D mask (every row starts at 0)."""
        mask = self.mask
        if mask is None or not hasattr(mask, "ndim") or mask.ndim != 2:
            return None
        return mask[:, -self.length:].long().argmax(dim=-1)


@dataclass
class Preparation:
    """What a source's :meth:`KVSource.prepare` gets beside the model.

    Attributes:
        decoder: The model's decoder (the owner of ``layers``).
        fingerprint: The loaded weights' identity (:func:`poptune.models.weights_fingerprint`); None: unknown.
        cache_dir: Where prepared files are kept (None: the poptune cache).
        make_fitter: Makes the fitter of maps on calibration text (a :class:`poptune.kvfit.fit.KVFitter`), made
            once on first use: fitting runs the engine, so it is handed down from the floor above.
    """

    decoder: Any  # decoder_of(model): its layers are the model family's own
    fingerprint: str | None = None
    cache_dir: str | os.PathLike[str] | None = None
    make_fitter: Callable[[], Any] | None = None
    _fitter: Any = field(default=None, repr=False)

    def fitter(self) -> Any:
        if self._fitter is None:
            if self.make_fitter is None:
                raise ConfigError("this preparation has no calibration fitter (prepare through poptune.prepare_kv)")
            self._fitter = self.make_fitter()
        return self._fitter


def block_of(config: Any, num_layers: int) -> tuple[int, int]:
    """``[start, stop)`` of the skipped layers of a final-block configuration."""
    skipped = config.skipped_layers(num_layers)
    return min(skipped), max(skipped) + 1


class KVSource:
    """One K/V source (see the module's docstring); a subclass per source, one instance in the registry.

    Attributes:
        name: What configurations hold (``PopConfig.kv``).
        label: How reports name it ("" for the default source: the paper's POP needs no word).
        tag: A file-name-safe short name ("" for the default source).
        help: One line for ``--kv``'s help.
        min_skip: Fewest skipped layers at which it differs from the default source (calibrated K/V of one
            skipped layer are its own: no map).
        export_key: The measurement detail an exported configuration carries (and its file), or None.
        export_suffix: The name ending of that file beside the exported JSON.
    """

    name: str = ""
    label: str = ""
    tag: str = ""
    help: str = ""
    min_skip: int = 1
    export_key: str | None = None
    export_suffix: str = ""

    def check(self, config: Any) -> None:
        """Raise :class:`ConfigError` unless the source can run ``config`` (a ``PopConfig``) on some model."""

    def ready(self, decoder: "nn.Module", config: Any, skipped: Any, layout: str) -> None:
        """Raise unless ``decoder`` can run ``config`` with this source now (``layout``: the attention masks' kind,
        ``4d`` or ``2d``, see :func:`poptune.engine.block.mask_layout`)."""

    def kept(self, pruned: int) -> int:
        """Of a prompt's ``pruned`` tokens, how many a skipped layer projects and keeps K/V for (the FLOPs ideal
        counts their projections and the boundary's attention over them, :mod:`poptune.measure.flops`)."""
        return pruned

    def writer(self, decoder: "nn.Module", config: Any, skipped: Any, segment: Segment) -> Write:
        """How each skipped layer (of ``skipped``, ``config``'s) writes the pruned tokens' K/V in ``segment``."""
        raise NotImplementedError

    def prepare(self, model: "nn.Module", tokenizer: Any, config: Any, preparation: Preparation) -> Any:
        """Make ``model`` ready to run ``config``; return what was attached (None: nothing was needed)."""
        return None

    def details(self, prepared: Any) -> dict[str, Any]:
        """What a measurement stores about what :meth:`prepare` returned."""
        return {}

    def report_lines(self, details: Sequence[Mapping[str, Any]]) -> list[str]:
        """What a study's summary says of what was prepared for this source, from its trials' ``details``."""
        return []

    def load_export(self, model: "nn.Module", decoder: "nn.Module", carried: dict[str, Any], folder: Path, *,
                    fingerprint: str | None) -> None:
        """Attach to ``model`` what an exported configuration carries (``carried``: its :attr:`export_key`
        object, its file named relative to ``folder``); ``fingerprint``: the weights it must fit (None: any)."""
