"""Fitting calibrated K/V maps for POP's skipped block, closed form, and keeping them on disk.

For a block ``[s, e)`` and each layer ``l`` in ``(s, e)``, POP writes the pruned tokens' K/V from the block-entry
state ``h_s`` where the full model has ``h_l``. On calibration text (WikiText-2 *validation* windows with a data
directory, text sampled from the model without one; :mod:`poptune.calibration`), with ``X = LN_l(h_s)`` and
``Y = W LN_l(h_l)`` (the layer's own projection of its true input, bias excluded, before the key norm and
RoPE), each of ``W_K`` and ``W_V`` is replaced by the ridge solution pulled towards the layer's own weights:

    W_fit = argmin ||X M^T - Y||^2 + lam ||M - W||^2 = ((X^T X + lam I)^-1 (X^T Y + lam W^T))^T,

in float64, with ``lam = ridge * trace(X^T X) / C``. With little text the fit stays near the layer's own
projection; when ``Y`` is an exact linear function of ``X`` the fit recovers it. The residual stream of the
calibration text is computed once (:class:`KVFitter`) and serves every block.

Maps are kept under ``<cache>/kv-maps/<weights fingerprint>/`` (:mod:`poptune.cache`: ``$POPTUNE_CACHE``, else
the user cache folder, ``~/.cache/poptune`` on Linux; ``$POPTUNE_KV_MAPS`` names the folder itself), one
safetensors file per block and calibration (:func:`calibrated_kv_maps`), and reused. Where that folder cannot be
written, they are kept in the cache's fallback folder (one warning line), and where none can, used without
being kept (one warning line); never a traceback.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from poptune.cache import cache_dir as default_cache_dir
from poptune.cache import fallback_dir, warn_unwritable
from poptune.calibration import Calibration, CalibrationSpec, calibration, calibration_file, residual_stream
from poptune.engine import PopConfig, attach_kv_maps, decoder_of
from poptune.errors import ConfigError, DataError
from poptune.kvmaps import KVMaps, kv_maps_of

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = ["KVFitSpec", "KVFitter", "calibrated_kv_maps", "kv_maps_dir", "prepare_kv"]


@dataclass(frozen=True)
class KVFitSpec:
    """How calibrated K/V maps are fitted.

    Attributes:
        samples: Calibration windows.
        length: Tokens per window (BOS included).
        seed: Seed of the window offsets (or of the sampled text).
        ridge: Pull towards the layer's own projection, relative to the mean diagonal of ``X^T X``.
        data_dir: Data directory (its ``wikitext-2/valid.txt``); None: ``$POPTUNE_DATA``, else sampled text.
    """

    samples: int = 16
    length: int = 512
    seed: int = 0
    ridge: float = 1e-3
    data_dir: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.ridge, bool) or not isinstance(self.ridge, (int, float)) or not self.ridge >= 0:
            raise ConfigError(f"`ridge` must be a number >= 0, got {self.ridge!r}")
        self.calibration()  # checks the amounts

    def calibration(self) -> CalibrationSpec:
        return CalibrationSpec(samples=self.samples, length=self.length, seed=self.seed, data_dir=self.data_dir,
                               batch_size=16, split="valid")  # sampled text: 16 rows per decode step


class KVFitter:
    """Fits the maps of any block of one model on one calibration text (its residual stream computed once)."""

    def __init__(self, model: "nn.Module", tokenizer: Any, spec: KVFitSpec, fingerprint: str) -> None:
        self.model, self.tokenizer, self.spec, self.fingerprint = model, tokenizer, spec, fingerprint
        self._calib: Calibration | None = None
        self._stream: "torch.Tensor | None" = None  # (L + 1, S, T, C), float32

    def _residual(self) -> tuple["torch.Tensor", Calibration]:
        if self._stream is None:
            self._calib = calibration(self.model, self.tokenizer, self.spec.calibration())
            self._stream = residual_stream(self.model, self._calib)
        return self._stream, self._calib  # type: ignore[return-value]

    def describe(self) -> dict[str, Any]:
        """The calibration text used so far (amount, seed, source); empty before the first fit."""
        return self._calib.describe() if self._calib is not None else {}

    def fit(self, start: int, stop: int) -> KVMaps:
        """The maps of block ``[start, stop)`` (layers ``start + 1 .. stop - 1``)."""
        import torch

        began = time.perf_counter()
        decoder = decoder_of(self.model)
        if not 0 <= start < stop <= len(decoder.layers):
            raise ConfigError(f"block [{start}, {stop}) does not fit a model of {len(decoder.layers)} layers")
        stream, calib = self._residual()
        entry = stream[start].flatten(0, 1)  # (S*T, C)
        weights, residuals = {}, {}
        with torch.inference_mode():
            for layer in range(start + 1, stop):
                weights[layer], residuals[str(layer)] = self._fit_layer(decoder.layers[layer], entry,
                                                                   stream[layer].flatten(0, 1))
        meta = {"calibration": calib.describe(), "tokens": int(entry.shape[0]), "ridge": self.spec.ridge,
                "relative_error": residuals, "seconds": round(time.perf_counter() - began, 3)}
        return KVMaps(start, stop, weights, self.fingerprint, meta)

    def _fit_layer(self, layer: "nn.Module", entry: "torch.Tensor", true_input: "torch.Tensor"
                   ) -> tuple[tuple["torch.Tensor", "torch.Tensor"], dict[str, list[float]]]:
        """Fitted ``(W_K, W_V)`` of one layer, and the relative error of own and fitted maps on the fit text."""
        import torch

        attn, dtype = layer.self_attn, layer.self_attn.k_proj.weight.dtype
        norm = layer.input_layernorm
        x = norm(entry.to(dtype)).double()  # (M, C): what POP projects
        x_true = norm(true_input.to(dtype)).double()  # (M, C): what the full model projects
        gram = x.T @ x  # (C, C)
        lam = self.spec.ridge * float(torch.diagonal(gram).mean())
        regularised = gram + lam * torch.eye(gram.shape[0], dtype=gram.dtype)
        fitted, errors = [], {}
        for name, proj in (("k", attn.k_proj), ("v", attn.v_proj)):
            own = proj.weight.double()  # (O, C)
            target = x_true @ own.T  # (M, O)
            solution = torch.linalg.solve(regularised, x.T @ target + lam * own.T).T  # (O, C)
            scale = float(target.norm())
            errors[name] = [float((x @ own.T - target).norm()) / scale, float((x @ solution.T - target).norm()) / scale]
            fitted.append(solution.to(dtype))
        return (fitted[0], fitted[1]), errors


def kv_maps_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where fitted maps are kept: ``<cache_dir>/kv-maps``, else ``$POPTUNE_KV_MAPS``, else
    ``<poptune cache>/kv-maps`` (:func:`poptune.cache.cache_dir`)."""
    if cache_dir is None and os.environ.get("POPTUNE_KV_MAPS"):
        return Path(os.environ["POPTUNE_KV_MAPS"]).expanduser()
    return Path(cache_dir or default_cache_dir()).expanduser() / "kv-maps"


def _fallback_maps_dir() -> Path:
    return fallback_dir() / "kv-maps"


def _relative_file(fingerprint: str, block: tuple[int, int], spec: KVFitSpec) -> Path:
    """``<fingerprint>/block-S-E-<calibration tag>.safetensors``: a block's maps file inside the maps folder."""
    source = calibration_file(spec.data_dir, "valid")
    described = {**asdict(spec), "data_dir": None, "source": "generated" if source is None else source.name}
    tag = hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:12]
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in fingerprint)
    return Path(safe) / f"block-{block[0]}-{block[1]}-{tag}.safetensors"


def _keep(maps: KVMaps, relative: Path, cache_dir: Any) -> None:
    """Save fitted maps in the maps folder; where it cannot be written, in the fallback folder; where neither can
    be, not at all (the maps stay attached): each said once, in one warning line."""
    primary = kv_maps_dir(cache_dir)
    maps.meta["cache_file"] = relative.as_posix()  # what the maps are, saved or not (see calibrated_kv_maps)
    for folder in (primary, _fallback_maps_dir()):
        try:
            maps.save(folder / relative)
        except OSError:
            continue
        if folder != primary:
            warn_unwritable(primary, folder)
        return
    warn_unwritable(primary, None)


def calibrated_kv_maps(model: "nn.Module", tokenizer: Any, config: PopConfig, *, fingerprint: str,
                       spec: KVFitSpec | None = None, cache_dir: str | os.PathLike[str] | None = None,
                       fitter: KVFitter | None = None) -> KVMaps:
    """The maps of ``config``'s block, loaded from the cache or fitted (and kept there), attached to ``model``.

    The cache is the maps folder (:func:`kv_maps_dir`), then the fallback folder of an unwritable cache
    (:func:`poptune.cache.fallback_dir`); fitted maps are kept in the first that can be written, or only in memory.

    Args:
        fingerprint: The loaded weights' identity (:func:`poptune.models.weights_fingerprint`).
        fitter: One to reuse across blocks (its residual stream is computed once); made here otherwise.

    Raises:
        ConfigError: a configuration without calibrated K/V.
    """
    if config.kv != "calibrated":
        raise ConfigError(f"{config} does not use calibrated K/V")
    skipped = config.skipped_layers(len(decoder_of(model).layers))
    block = (min(skipped), max(skipped) + 1)
    spec = fitter.spec if fitter is not None else (spec or KVFitSpec())
    relative = _relative_file(fingerprint, block, spec)
    paths = [folder / relative for folder in dict.fromkeys((kv_maps_dir(cache_dir), _fallback_maps_dir()))]
    held = kv_maps_of(decoder_of(model)).get(block)
    if held is not None and held.fingerprint == fingerprint and (
            held.path in paths or held.path is None and held.meta.get("cache_file") == relative.as_posix()):
        return held  # attached already (a trial's timing and its scoring need the same maps)
    maps = None
    for path in (p for p in paths if p.is_file()):
        try:
            maps = KVMaps.load(path, fingerprint=fingerprint)
            break
        except DataError:
            continue  # an unreadable or foreign file in the cache is fitted anew (and replaced)
    if maps is None:
        maps = (fitter or KVFitter(model, tokenizer, spec, fingerprint)).fit(*block)
        _keep(maps, relative, cache_dir)
    attach_kv_maps(model, maps)
    return maps


def prepare_kv(model: "nn.Module", tokenizer: Any, config: PopConfig, *, fingerprint: str | None,
               spec: KVFitSpec | None = None, fitter: KVFitter | None = None) -> KVMaps | None:
    """Make ``model`` ready to run ``config``: its block's maps attached if it uses calibrated K/V, else nothing.

    Raises:
        ConfigError: calibrated K/V asked for on a model whose weights have no fingerprint.
    """
    if config.kv != "calibrated":
        return None
    if fingerprint is None:
        raise ConfigError("calibrated K/V needs the model's weights fingerprint (a model loaded by name)")
    return calibrated_kv_maps(model, tokenizer, config, fingerprint=fingerprint, spec=spec, fitter=fitter)
