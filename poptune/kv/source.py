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
- **how the model attends over what it wrote** (:meth:`~KVSource.boundary_mask`: the boundary tokens' mask in a
  skipped layer; :meth:`~KVSource.cache_context`: every later forward over a cache the source left in a shape
  plain attention cannot read, found by :func:`source_of` on a cache the source marked, :meth:`~KVSource.mark`): the
  hooks the engine calls, so that it knows no source's cache;
- **what an exported configuration carries** (:attr:`~KVSource.export_key`, :attr:`~KVSource.export_suffix`,
  :meth:`~KVSource.load_export`), and what a study's summary says of it (:meth:`~KVSource.report_lines`).

What a source reads of a configuration is typed by :class:`SkipPlan` (``PopConfig`` is one: the engine's, a
package this one does not import), of the model's decoder by :class:`Decoder`.

This package sits at the bottom of the engine's floor: it imports neither the engine nor the block, which
import it. Work that needs the engine -- fitting calibrated maps runs POP prefills to check them -- lives a floor
up (:mod:`poptune.kvfit`) and reaches a source's :meth:`~KVSource.prepare` through its :class:`Preparation`.
"""

from __future__ import annotations

import abc
import contextlib
import functools
import os
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from poptune.errors import ConfigError

if TYPE_CHECKING:
    import torch
    from torch import nn

    from poptune.kv.maps import KVMaps

__all__ = ["Decoder", "Fitter", "KVSource", "Preparation", "Segment", "SkipPlan", "Write", "block_of", "source_of"]

#: ``write(layer, hidden_states, position_embeddings, cache)``: one skipped layer's pruned tokens' K/V into the
#: cache; ``hidden_states`` (B, P, C) is the state of the P pruned tokens entering the layer (the block-entry state,
#: unless something between the skipped layers changed it). Within one segment the engine hands the layers that
#: receive the same pruned state the very same tensor object, so a writer may project once for all of them
#: (:mod:`poptune.kv.block_kv`); another object may hold another state.
Write = Callable[["nn.Module", "torch.Tensor", Any, Any], None]

#: Set on a cache by the source that left it in a shape plain attention cannot read (:meth:`KVSource.mark`): read
#: on every forward under POP, so that a cache no source marked costs one attribute lookup.
_MARK = "_poptune_kv_source"


class SkipPlan(Protocol):
    """What a source reads of a configuration (``poptune.engine.PopConfig`` is one)."""

    @property
    def skip(self) -> int: ...

    @property
    def layers(self) -> tuple[int, ...] | None: ...

    @property
    def kv(self) -> str: ...

    def skipped_layers(self, num_layers: int) -> Sequence[int]:
        """The layers skipped in prefill in a model of ``num_layers``."""
        ...


class Decoder(Protocol):
    """The model's decoder, the owner of ``layers`` (:func:`poptune.engine.decoder_of`); its layers and config are
    each model family's own."""

    @property
    def layers(self) -> Sequence[Any]: ...

    @property
    def config(self) -> Any: ...


class Fitter(Protocol):
    """What fits a block's maps on calibration text (:class:`poptune.kvfit.fit.KVFitter`, a floor up)."""

    @property
    def spec(self) -> Any: ...  # its KVFitSpec: `spec.source()` says which text, in words

    def cache_tag(self) -> str:
        """How the maps are fitted, as the end of their file's name."""
        ...

    def fit(self, start: int, stop: int) -> "KVMaps":
        """The fitted maps of the block ``[start, stop)``."""
        ...


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

    decoder: Decoder
    fingerprint: str | None = None
    cache_dir: str | os.PathLike[str] | None = None
    make_fitter: Callable[[], Fitter] | None = None
    _fitter: Fitter | None = field(default=None, repr=False)

    def fitter(self) -> Fitter:
        if self._fitter is None:
            if self.make_fitter is None:
                raise ConfigError("this preparation has no calibration fitter (prepare through poptune.prepare_kv)")
            self._fitter = self.make_fitter()
        return self._fitter


def block_of(config: SkipPlan, num_layers: int) -> tuple[int, int]:
    """``[start, stop)`` of the skipped layers of a final-block configuration."""
    skipped = config.skipped_layers(num_layers)
    return min(skipped), max(skipped) + 1


def source_of(cache: Any) -> "KVSource | None":
    """The source that left ``cache`` in a shape plain attention cannot read (:meth:`KVSource.mark`), or None."""
    return getattr(cache, _MARK, None) if cache is not None else None


class KVSource(abc.ABC):
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

    def check(self, config: SkipPlan) -> None:
        """Raise :class:`ConfigError` unless the source can run ``config`` on some model (default: any)."""
        return None

    def ready(self, decoder: Decoder, config: SkipPlan, skipped: Sequence[int], layout: str) -> None:
        """Raise unless ``decoder`` can run ``config`` with this source now (``layout``: the attention masks' kind,
        ``4d`` or ``2d``, see :func:`poptune.engine.block.mask_layout`); default: always."""
        return None

    def kept(self, pruned: int) -> int:
        """Of a prompt's ``pruned`` tokens, how many a skipped layer projects and keeps K/V for (the FLOPs ideal
        counts their projections and the boundary's attention over them, :mod:`poptune.measure.flops`)."""
        return pruned

    @abc.abstractmethod
    def writer(self, decoder: Decoder, config: SkipPlan, skipped: Sequence[int], segment: Segment) -> Write:
        """How each skipped layer (of ``skipped``, ``config``'s) writes the pruned tokens' K/V in ``segment``."""

    def boundary_mask(self, layer: Any, cache: Any, mask: Any, queries: tuple[int, int], mask_offset: int,
                      device: Any, sliced: Callable[[], Any]) -> Any:
        """The attention mask of a segment's boundary queries ``[start, stop)`` in the skipped layer ``layer``,
        over the keys its cache returns once their own K/V are added (the engine calls it after the layer's
        :data:`Write`).

        ``mask`` is the model's for the whole segment (4-D: its first column at key position ``mask_offset``);
        ``sliced()`` is the engine's slice of it for a cache layer holding every token it has seen (or a
        sliding window of them): the default, for a source whose writes leave such a layer.
        """
        return sliced()

    def cache_context(self, decoder: Decoder, cache: Any, layout: str, exclude: Sequence[int] = ()
                      ) -> AbstractContextManager[None]:
        """Within, ``decoder``'s forwards attend over ``cache``, which this source marked (:meth:`mark`), its layers but
        ``exclude`` (the skipped block, whose boundary asks :meth:`boundary_mask`). The engine enters it around
        every forward over such a cache, POP's or the plain model's (:func:`poptune.engine.block.cache_context`).

        Default: nothing (a source that leaves plain cache layers never marks a cache).
        """
        return contextlib.nullcontext()

    def mark(self, cache: Any) -> None:
        """Say that ``cache`` holds layers in this source's shape: later forwards over it enter
        :meth:`cache_context` (:func:`source_of`)."""
        setattr(cache, _MARK, self)

    def prepare(self, model: "nn.Module", tokenizer: Any, config: SkipPlan, preparation: Preparation
                ) -> object | None:
        """Make ``model`` ready to run ``config``; return what was attached (None: nothing was needed)."""
        return None

    def details(self, prepared: object | None) -> dict[str, Any]:
        """What a measurement stores about what :meth:`prepare` returned."""
        return {}

    def report_lines(self, details: Sequence[Mapping[str, Any]]) -> list[str]:
        """What a study's summary says of what was prepared for this source, from its trials' ``details``."""
        return []

    def load_export(self, model: "nn.Module", decoder: Decoder, carried: dict[str, Any], folder: Path, *,
                    fingerprint: str | None) -> None:
        """Attach to ``model`` what an exported configuration carries (``carried``: its :attr:`export_key`
        object, its file named relative to ``folder``); ``fingerprint``: the weights it must fit (None: any).
        Default: nothing (a source without :attr:`export_key` carries nothing)."""
        return None
