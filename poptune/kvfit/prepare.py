"""Preparing a loaded model for a configuration's K/V source: the one path every command and the tuner take.

:func:`prepare_kv` asks the registry for the configuration's source (:mod:`poptune.kv.registry`) and runs its
``prepare`` (:class:`poptune.kv.source.KVSource`): nothing for the layers' own K/V or anchor K/V; the block's maps
for calibrated K/V, read from the maps folder or fitted there first. It sits a floor above the engine because
fitting runs the engine (the fit's check prefills with POP); the source gets the fitter through its
:class:`~poptune.kv.source.Preparation`, made only if it fits. :func:`kv_details` says what a measurement stores
about what was prepared. :func:`attach_kv_maps` and :func:`detach_kv_maps` hand a model's decoder to the calibrated
source, which holds the maps (:class:`poptune.kv.calibrated.CalibratedKV`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from poptune.engine import PopConfig, decoder_of
from poptune.kv import calibrated
from poptune.kv.maps import KVMaps
from poptune.kv.registry import source
from poptune.kv.source import Preparation
from poptune.kvfit.fit import KVFitSpec, KVFitter

if TYPE_CHECKING:
    from torch import nn

__all__ = ["attach_kv_maps", "detach_kv_maps", "kv_details", "prepare_kv"]


def prepare_kv(model: "nn.Module", tokenizer: Any, config: PopConfig, *, fingerprint: str | None = None,
               spec: KVFitSpec | None = None, cache_dir: str | os.PathLike[str] | None = None,
               fitter: KVFitter | Callable[[], KVFitter] | None = None) -> Any:
    """Make ``model`` ready to run ``config`` (its K/V source's preparation); return what the source attached
    (calibrated K/V: the block's :class:`~poptune.kv.maps.KVMaps`; None where nothing is needed).

    Args:
        fingerprint: The loaded weights' identity (:func:`poptune.models.weights_fingerprint`); sources that
            keep files per weights need it (calibrated K/V: a ConfigError without).
        spec: How maps are fitted where they must be (default :class:`KVFitSpec`); ``fitter``: one to reuse
            across blocks (its residual stream is computed once), or what makes it (called only if a fit is
            needed), made here otherwise.
        cache_dir: Where prepared files are kept (default: the poptune cache, ``$POPTUNE_KV_MAPS``).

    Raises:
        ConfigError: the configuration does not fit the model, or its source cannot be prepared (see above).
    """
    decoder = decoder_of(model)
    config.check(len(decoder.layers))

    def make_fitter() -> KVFitter:
        if fitter is None:
            assert fingerprint is not None  # the calibrated source refuses a model without one before fitting
            return KVFitter(model, tokenizer, spec or KVFitSpec(), fingerprint)
        return fitter if isinstance(fitter, KVFitter) else fitter()

    return source(config.kv).prepare(model, tokenizer, config, Preparation(decoder, fingerprint, cache_dir,
                                                                           make_fitter))


def kv_details(config: PopConfig, prepared: Any) -> dict[str, Any]:
    """What a measurement of ``config`` stores about what :func:`prepare_kv` returned for it (calibrated K/V:
    its maps, ``{"kv_maps": ...}``; nothing for the others)."""
    return source(config.kv).details(prepared)


def attach_kv_maps(model: "nn.Module", maps: KVMaps) -> None:
    """Give ``model`` the fitted K/V maps of one block, which calibrated K/V (:mod:`poptune.kv.calibrated`) uses on
    that block.

    A model holds maps for any number of blocks (one per ``(skip, offset)``); attaching maps of a block it
    already holds replaces them.

    Raises:
        ConfigError: maps that do not fit the model's layers (another architecture or size).
    """
    calibrated.SOURCE.attach(decoder_of(model), maps)


def detach_kv_maps(model: "nn.Module") -> None:
    """Drop every K/V map ``model`` holds."""
    calibrated.SOURCE.detach(decoder_of(model))
