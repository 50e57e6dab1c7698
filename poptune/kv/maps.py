"""Calibrated K/V maps for POP's skipped block: fitted projections in place of the layers' own.

POP writes a skipped layer's prompt K/V through the layer's own K/V projections applied to the hidden state
entering the block, a state the layer never saw in training. A :class:`KVMaps` holds, for one block
``[start, stop)`` and each of its layers after the first, a K and a V projection fitted to map the block-entry
state (after the layer's own input norm) to what the full model's projections output there (before the key
norm and RoPE, which the engine then applies as usual). They have the shapes of the layers' own projections,
so a calibrated prefill costs what the plain one does, but for one more K/V projection per skipped layer where
the maps treat sink tokens on their own. The block's first layer needs no map: the block-entry state is its
true input.

**Sink tokens.** A token whose block-entry state has a norm above :attr:`KVMaps.sink_norm` (Gemma-3's BOS: an
attention sink whose residual stream is 10-20x every other token's, and is the same in every prompt) writes
its K/V through the sink projections of :attr:`KVMaps.sinks` (a map fitted on sink tokens alone), else through
the layer's own. Detecting the sink by its state, not by its position, keeps left-padded rows, chunks and
later turns right.

Maps are fitted by :mod:`poptune.kvfit.fit`, stored as one safetensors file per (model weights, block) with how
they were fitted (kept under :func:`kv_maps_dir`), and attached to a loaded model with
:func:`poptune.attach_kv_maps` (the calibrated source holds them, :mod:`poptune.kv.calibrated`), which then uses
the maps of its block::

    attach_kv_maps(model, KVMaps.load(path, fingerprint=weights_fingerprint("gemma-3")))
    with apply_pop(model, PopConfig(skip=6, kv="calibrated")):
        model.generate(...)
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from poptune.cache import cache_dir as default_cache_dir
from poptune.cache import fallback_dir, warn_unwritable
from poptune.errors import ConfigError, DataError

if TYPE_CHECKING:
    import torch

__all__ = ["KVMaps", "LayerMaps", "file_sha256", "kv_maps_dir", "maps_file", "keep", "maps_paths", "read_cached"]

#: What a maps file's metadata must hold (strings; safetensors metadata is str -> str).
_REQUIRED = ("format", "fingerprint", "start", "stop")
_FORMAT = "poptune-kv-maps-2"  # 2: sink projections and threshold (issue 38)


@dataclass(frozen=True)
class LayerMaps:
    """What one skipped layer writes its pruned tokens' K/V with (see :func:`poptune.kv.project.prompt_kv`).

    Attributes:
        k, v: The fitted projections (out x in).
        sink: ``(k, v)`` for sink tokens; None: the layer's own projections.
        sink_norm: Block-entry state norm above which a token is a sink; None: no token is.
    """

    k: "torch.Tensor"
    v: "torch.Tensor"
    sink: "tuple[torch.Tensor, torch.Tensor] | None" = None
    sink_norm: float | None = None


@dataclass
class KVMaps:
    """Fitted K/V projections of the layers of one skipped block.

    Attributes:
        start: First layer of the block.
        stop: One past its last layer.
        weights: Per layer in ``(start, stop)``: ``(k_weight, v_weight)``, shaped like the layer's own
            ``k_proj.weight`` and ``v_proj.weight`` (out x in).
        fingerprint: The weights the maps were fitted on (:func:`poptune.models.weights_fingerprint`).
        meta: How they were fitted (calibration source, tokens, seed, ridge), stored with them.
        path: The file they were read from or last written to (None: only in memory).
        sinks: Per layer (some or all of ``(start, stop)``): ``(k_weight, v_weight)`` for sink tokens; a layer
            without: its own projections for them.
        sink_norm: Block-entry state norm above which a token is a sink (None: no sink handling).
    """

    start: int
    stop: int
    weights: dict[int, tuple["torch.Tensor", "torch.Tensor"]]
    fingerprint: str
    meta: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None
    sinks: dict[int, tuple["torch.Tensor", "torch.Tensor"]] = field(default_factory=dict)
    sink_norm: float | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.start < self.stop:
            raise ConfigError(f"a block needs 0 <= start < stop, got [{self.start}, {self.stop})")
        expected = set(range(self.start + 1, self.stop))
        if set(self.weights) != expected:
            raise ConfigError(f"maps of block [{self.start}, {self.stop}) need layers {sorted(expected)}, "
                              f"got {sorted(self.weights)}")
        if not set(self.sinks) <= expected:
            raise ConfigError(f"sink maps of block [{self.start}, {self.stop}) must be of layers {sorted(expected)}, "
                              f"got {sorted(self.sinks)}")
        if self.sink_norm is not None and not self.sink_norm > 0:
            raise ConfigError(f"`sink_norm` must be > 0 (or None), got {self.sink_norm!r}")

    def layer(self, index: int) -> LayerMaps | None:
        """What layer ``index`` writes its pruned tokens' K/V with (None: a layer without maps)."""
        if index not in self.weights:
            return None
        k, v = self.weights[index]
        return LayerMaps(k, v, self.sinks.get(index), self.sink_norm)

    @property
    def block(self) -> tuple[int, int]:
        return self.start, self.stop

    def describe(self) -> dict[str, Any]:
        """What the maps are, as stored with a measurement and an exported configuration."""
        keys = ("calibration", "tokens", "ridge", "sink_norm", "kept_own", "validation")
        fit: dict[str, Any] = {key: self.meta[key] for key in keys if key in self.meta}
        where: dict[str, Any] = {} if self.path is None else {"file": str(self.path), "sha256": file_sha256(self.path)}
        return {"block": [self.start, self.stop], "fingerprint": self.fingerprint, **where, **fit}

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the maps and their metadata to ``path`` (safetensors, written atomically).

        Raises:
            OSError: ``path`` cannot be written (safetensors' own write errors included).
        """
        from safetensors import SafetensorError
        from safetensors.torch import save_file

        tensors = {}
        for layer, (k, v) in self.weights.items():
            tensors[f"layers.{layer}.k"] = k.detach().contiguous().cpu()
            tensors[f"layers.{layer}.v"] = v.detach().contiguous().cpu()
        for layer, (k, v) in self.sinks.items():
            tensors[f"sinks.{layer}.k"] = k.detach().cpu().clone()  # never sharing a map's storage
            tensors[f"sinks.{layer}.v"] = v.detach().cpu().clone()
        metadata = {"format": _FORMAT, "fingerprint": self.fingerprint, "start": str(self.start),
                    "stop": str(self.stop), "meta": json.dumps(self.meta, sort_keys=True),
                    "sink_norm": "" if self.sink_norm is None else repr(float(self.sink_norm))}
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        try:
            save_file(tensors, str(partial), metadata=metadata)
        except SafetensorError as e:  # its I/O errors are not OSErrors
            raise OSError(f"cannot write {path}: {e}") from e
        os.replace(partial, path)
        self.path = path
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, fingerprint: str | None = None,
             sha256: str | None = None) -> "KVMaps":
        """Read maps written by :meth:`save`.

        Args:
            fingerprint: When given, the weights the maps must have been fitted on.
            sha256: When given, the file's expected sha256 (an exported configuration's reference).

        Raises:
            DataError: a missing, unreadable or malformed file, another model's maps, or a changed file.
        """
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        path = Path(path)
        if not path.is_file():
            raise DataError(f"K/V maps: {path} is missing")
        if sha256 is not None and file_sha256(path) != sha256:
            raise DataError(f"K/V maps: {path} does not match its recorded sha256 {sha256[:12]}... (changed?)")
        try:
            from safetensors import safe_open

            with safe_open(str(path), framework="pt") as handle:
                metadata = handle.metadata() or {}
            tensors = load_file(str(path))
        except (SafetensorError, OSError, ValueError) as exc:
            raise DataError(f"K/V maps: {path} is not a readable safetensors file ({exc})") from None
        missing = [key for key in _REQUIRED if key not in metadata]
        if missing or metadata["format"] != _FORMAT:
            raise DataError(f"K/V maps: {path} is not a poptune K/V maps file (metadata {sorted(metadata)})")
        if fingerprint is not None and metadata["fingerprint"] != fingerprint:
            raise DataError(f"K/V maps: {path} was fitted on other weights ({metadata['fingerprint']}), "
                            f"not on the model loaded ({fingerprint})")
        start, stop = int(metadata["start"]), int(metadata["stop"])
        try:
            weights = {layer: (tensors[f"layers.{layer}.k"], tensors[f"layers.{layer}.v"])
                       for layer in range(start + 1, stop)}
            sinks = {layer: (tensors[f"sinks.{layer}.k"], tensors[f"sinks.{layer}.v"])
                     for layer in range(start + 1, stop) if f"sinks.{layer}.k" in tensors}
        except KeyError as exc:
            raise DataError(f"K/V maps: {path} lacks the tensor {exc.args[0]}") from None
        sink_norm = float(metadata["sink_norm"]) if metadata.get("sink_norm") else None
        return cls(start, stop, weights, metadata["fingerprint"], json.loads(metadata.get("meta", "{}")), path,
                   sinks, sink_norm)

    def check_fits(self, decoder: Any) -> None:
        """Raise :class:`ConfigError` unless every map has the shape of its layer's own projection."""
        if self.stop > len(decoder.layers):
            raise ConfigError(f"maps of block [{self.start}, {self.stop}) do not fit a model of "
                              f"{len(decoder.layers)} layers")
        for layer, (k, v) in self.weights.items():
            attn = decoder.layers[layer].self_attn
            if tuple(k.shape) != tuple(attn.k_proj.weight.shape) or tuple(v.shape) != tuple(attn.v_proj.weight.shape):
                raise ConfigError(f"the K/V maps of layer {layer} have shapes {tuple(k.shape)}, {tuple(v.shape)}, "
                                  f"not the layer's {tuple(attn.k_proj.weight.shape)}, "
                                  f"{tuple(attn.v_proj.weight.shape)}")


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The sha256 of a file's bytes, hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


# --------------------------------------------------------------------------------------------------------------
# The maps folder: fitted maps kept per weights and block, reused


def kv_maps_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where fitted maps are kept: ``<cache_dir>/kv-maps``, else ``$POPTUNE_KV_MAPS``, else
    ``<poptune cache>/kv-maps`` (:func:`poptune.cache.cache_dir`)."""
    if cache_dir is None and os.environ.get("POPTUNE_KV_MAPS"):
        return Path(os.environ["POPTUNE_KV_MAPS"]).expanduser()
    return Path(cache_dir or default_cache_dir()).expanduser() / "kv-maps"


def _fallback_maps_dir() -> Path:
    return fallback_dir() / "kv-maps"


def maps_file(fingerprint: str, block: tuple[int, int], tag: str) -> Path:
    """``<fingerprint>/block-S-E-<tag>.safetensors``: a block's maps file inside the maps folder (``tag``: how they
    are fitted, :meth:`poptune.kvfit.fit.KVFitter.cache_tag`)."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in fingerprint)
    return Path(safe) / f"block-{block[0]}-{block[1]}-{tag}.safetensors"


def maps_paths(relative: Path, cache_dir: Any = None) -> list[Path]:
    """Where ``relative`` may be kept: the maps folder, then the fallback folder of an unwritable cache."""
    return [folder / relative for folder in dict.fromkeys((kv_maps_dir(cache_dir), _fallback_maps_dir()))]


def read_cached(paths: list[Path], fingerprint: str) -> KVMaps | None:
    """The maps of the first readable file of ``paths`` (None: none; an unreadable or foreign file is skipped,
    to be fitted anew and replaced)."""
    for path in (p for p in paths if p.is_file()):
        try:
            return KVMaps.load(path, fingerprint=fingerprint)
        except DataError:
            continue
    return None


def keep(maps: KVMaps, relative: Path, cache_dir: Any) -> None:
    """Save fitted maps in the maps folder; where it cannot be written, in the fallback folder; where neither can
    be, not at all (the maps stay attached): each said once, in one warning line."""
    primary = kv_maps_dir(cache_dir)
    maps.meta["cache_file"] = relative.as_posix()  # what the maps are, saved or not
    for folder in (primary, _fallback_maps_dir()):
        try:
            maps.save(folder / relative)
        except OSError:
            continue
        if folder != primary:
            warn_unwritable(primary, folder)
        return
    warn_unwritable(primary, None)
