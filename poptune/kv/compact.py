"""A layer's cache that keeps only some of the tokens it has seen, and the attention masks over it.

Hugging Face's cache layers hold every token a layer has seen (``DynamicLayer``) or the last ``window - 1`` of
them (``DynamicSlidingWindowLayer``). The model builds one attention mask per layer type before any layer runs,
over *columns* -- the tokens seen so far, from the layer's ``kv_offset`` -- sized by the first layer of that type.
A :class:`CompactLayer` reports the sizes its type would report (so those masks stay right for every layer of
the type, itself included) but stores the K/V of the tokens it keeps only, each with its column. A layer whose
cache is compact attends with the model's mask gathered at those columns (:func:`compact_mask`), so padding,
sliding windows and bidirectional image blocks keep their exact shape over the keys kept, and its attention
reads fewer keys: the memory and the decode work of the dropped tokens are really gone.

The anchor source (:mod:`poptune.kv.anchor`) marks a cache it made compact, and the engine then gathers the masks
(:func:`gathering`, through :meth:`poptune.kv.source.KVSource.cache_context`) in every forward over it, POP's or the
plain model's (:func:`poptune.engine.block.cache_context`). Decoded by a model outside that context, a compact
cache fails on the mask's shape wherever the model passes a mask: never silently.

This module imports torch and transformers: import it inside functions (``import poptune`` loads neither).
"""

from __future__ import annotations

import bisect
import contextlib
from collections.abc import Iterator, Sequence
from functools import partial
from typing import Any

import torch
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

from poptune.errors import UnsupportedModelError
from poptune.patching import Patch

__all__ = ["CompactLayer", "compact_layer", "compact_mask", "gathering", "is_compact"]


class CompactLayer(DynamicLayer):
    """A cache layer holding the K/V of some of the tokens it has seen.

    Attributes:
        sliding_window: The window of a sliding-window layer (None: full attention). Tokens that no later query
            can see any more are dropped as ``DynamicSlidingWindowLayer`` drops them (kept while recording the
            past, until :meth:`crop`).
        cumulative_length: Tokens seen (the sizes of the masks follow it, not the keys held).
        columns: (B, K) long: the column of each key held, per row (rows may keep different tokens).
        bounds: Per key held, the largest column any row has there (host side, ascending: what can be dropped
            is known without reading the device).
    """

    row_fields = ("keys", "values", "columns")  # the tensors of one row each (see poptune.evaluate.scoring)
    # Set by lazy_initialization before any read (the cache layer mixin types them Optional: unset until then).
    keys: torch.Tensor
    values: torch.Tensor

    def __init__(self, sliding_window: int | None = None) -> None:
        super().__init__()
        self.sliding_window = sliding_window
        self.is_sliding = sliding_window is not None
        self.cumulative_length = 0
        self.columns: torch.Tensor | None = None
        self.bounds: tuple[int, ...] = ()
        self.record_past = False

    @classmethod
    def of(cls, layer: Any) -> "CompactLayer":
        """``layer`` (a dynamic one, full or sliding) as a compact layer keeping everything it holds."""
        if isinstance(layer, cls):
            return layer
        if type(layer) not in (DynamicLayer, DynamicSlidingWindowLayer):
            raise UnsupportedModelError(f"a {type(layer).__name__} cache layer cannot drop tokens (static, quantized "
                                        "or linear-attention caches): use a dynamic cache")
        compact = cls(layer.sliding_window if getattr(layer, "is_sliding", False) else None)
        compact.record_past = getattr(layer, "record_past", False)
        seen = layer.get_seq_length()
        if layer.is_initialized and layer.keys is not None and layer.keys.numel():
            held = layer.keys.shape[-2]
            columns = torch.arange(seen - held, seen, device=layer.keys.device).expand(layer.keys.shape[0], held)
            compact.keep(layer.keys, layer.values, columns, range(seen - held, seen))
        compact.cumulative_length = seen
        return compact

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        self.keys = key_states[..., :0, :]
        self.values = value_states[..., :0, :]
        self.columns = torch.zeros((key_states.shape[0], 0), dtype=torch.long, device=self.device)
        self.is_initialized = True

    def keep(self, keys: torch.Tensor, values: torch.Tensor, columns: torch.Tensor, bounds: Sequence[int]) -> None:
        """Hold ``keys``/``values`` (B, H, K, D) of tokens at ``columns`` (B, K), whose largest column per key is
        ``bounds`` (ascending, from the last bound held on): tokens seen already or being added."""
        bounds = tuple(bounds)
        if len(bounds) != keys.shape[-2] or list(bounds) != sorted(bounds) or (
                self.bounds and bounds and bounds[0] < self.bounds[-1]):
            raise ValueError(f"a compact layer keeps keys in column order, got bounds {bounds[:4]}... after "
                             f"{self.bounds[-1:]}")
        if not self.is_initialized:
            self.lazy_initialization(keys, values)
        assert self.columns is not None  # made by lazy_initialization
        self.keys = torch.cat([self.keys, keys], dim=-2)
        self.values = torch.cat([self.values, values], dim=-2)
        self.columns = torch.cat([self.columns, columns.to(self.device)], dim=-1)
        self.bounds += bounds

    def skip(self, count: int) -> None:
        """``count`` more tokens seen, none of them kept."""
        self.cumulative_length += count
        self._trim()

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Keep the new tokens (the next columns); return every key and value held, the new ones last."""
        start, count = self.cumulative_length, key_states.shape[-2]
        columns = torch.arange(start, start + count, device=key_states.device).expand(key_states.shape[0], count)
        self.keep(key_states, value_states, columns, range(start, start + count))
        self.cumulative_length += count
        keys, values = self.keys, self.values
        self._trim()
        return keys, values

    def visible_columns(self, count: int, batch: int, device: Any) -> torch.Tensor:
        """(B, K + count): the columns of the keys :meth:`update` returns once ``count`` new tokens are added."""
        start = self.cumulative_length
        new = torch.arange(start, start + count, device=device).expand(batch, count)
        return new if self.columns is None else torch.cat([self.columns.expand(batch, -1), new], dim=-1)

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        """The length and offset of the masks the model builds: what this layer's type would report."""
        seen, window = self.cumulative_length, self.sliding_window
        if window is None:
            return seen + query_length, 0
        offset = max(seen - window + 1, 0)
        return (window - 1 if seen >= window else seen) + query_length, offset

    def get_seq_length(self) -> int:
        return self.cumulative_length

    def get_max_length(self) -> int:
        return -1 if self.sliding_window is None else self.sliding_window

    def _trim(self) -> None:
        if self.sliding_window is not None and not self.record_past:
            self._drop_before(self.cumulative_length - self.sliding_window + 1)

    def _drop_before(self, limit: int) -> None:
        """Drop the keys no row holds at a column >= ``limit``."""
        cut = bisect.bisect_left(self.bounds, limit)
        if cut:
            assert self.columns is not None  # cut > 0: keys are held
            self.keys, self.values = self.keys[..., cut:, :], self.values[..., cut:, :]
            self.columns, self.bounds = self.columns[:, cut:], self.bounds[cut:]

    def activate_past_recording(self) -> None:
        self.record_past = True

    def crop(self, tokens_to_remove: int) -> None:
        """Forget the last ``-tokens_to_remove`` tokens (they must be held: decoded ones are); a sliding layer then
        keeps its window only, as ``DynamicSlidingWindowLayer.crop`` does."""
        if tokens_to_remove > 0:
            raise ValueError("crop a compact cache layer with a negative count (tokens to remove)")
        count = -tokens_to_remove
        if count:
            last = self.cumulative_length - count
            cut = bisect.bisect_left(self.bounds, last)
            if len(self.bounds) - cut != count:
                raise RuntimeError(f"cannot crop {count} tokens: this compact cache layer did not keep them all")
            assert self.columns is not None  # the count above is held
            self.keys, self.values = self.keys[..., :cut, :], self.values[..., :cut, :]
            self.columns, self.bounds = self.columns[:, :cut], self.bounds[:cut]
            self.cumulative_length = last
        if self.sliding_window is not None:
            self._drop_before(self.cumulative_length - self.sliding_window + 1)

    def reset(self) -> None:
        super().reset()
        self.columns, self.bounds, self.cumulative_length = None, (), 0

    def _rows(self, pick: Any) -> None:
        if self.is_initialized:
            self.keys, self.values, self.columns = pick(self.keys), pick(self.values), pick(self.columns)

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self._rows(lambda t: t.index_select(0, beam_idx.to(t.device)))

    def batch_repeat_interleave(self, repeats: int) -> None:
        self._rows(lambda t: t.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._rows(lambda t: t[indices, ...])


def compact_layer(cache: Any, index: int) -> CompactLayer:
    """Layer ``index`` of ``cache`` made compact (what it holds kept), in place; a lazily grown cache is grown."""
    layers = cache.layers
    while len(layers) <= index:
        if getattr(cache, "layer_class_to_replicate", None) is None:
            raise UnsupportedModelError(f"{type(cache).__name__} has no layer {index} to compact")
        layers.append(cache.layer_class_to_replicate())
    held = layers[index]
    if not isinstance(held, CompactLayer):
        held = layers[index] = CompactLayer.of(held)
    return held


def is_compact(cache: Any) -> bool:
    """Whether any layer of ``cache`` is compact."""
    return any(isinstance(layer, CompactLayer) for layer in getattr(cache, "layers", ()))


@contextlib.contextmanager
def gathering(decoder: Any, cache: Any, exclude: Sequence[int] = ()) -> Iterator[None]:
    """Within, the layers of ``decoder`` whose cache in ``cache`` is compact, but ``exclude``, attend with the
    model's masks gathered at the tokens they keep (4-D masks only: the caller checks the layout)."""
    patches: list[Patch] = []
    try:
        for i, held in enumerate(cache.layers):
            if isinstance(held, CompactLayer) and i not in exclude:
                layer = decoder.layers[i]
                patches.append(Patch(layer, partial(_compact_layer_forward, layer)))
        yield
    finally:
        for patch in reversed(patches):
            patch.undo()


def _compact_layer_forward(layer: Any, inner: Any) -> Any:
    """A layer whose cache is compact: its own forward, with the mask of its type gathered at the kept tokens."""

    def forward(hidden_states: torch.Tensor, *args: Any, attention_mask: Any = None, cache: Any = None,
                **kwargs: Any) -> Any:
        index, (batch, n) = layer.self_attn.layer_idx, hidden_states.shape[:2]
        _, offset = cache.get_mask_sizes(n, index)
        mask = compact_mask(attention_mask, cache.layers[index], (0, n), offset, batch=batch,
                            device=hidden_states.device, window=getattr(layer.self_attn, "sliding_window", None))
        return inner(hidden_states, *args, attention_mask=mask, cache=cache, **kwargs)

    return forward


def compact_mask(mask: Any, held: CompactLayer, queries: tuple[int, int], mask_offset: int, *, batch: int,
                 device: Any, window: int | None = None) -> Any:
    """The attention mask of the queries ``[start, stop)`` (rows of ``mask``) over the keys ``held`` returns
    once their own K/V are added.

    ``mask`` is the model's for the layer's type: (B or 1, 1, Q, KV) whose first column is ``mask_offset``, boolean
    (SDPA) or additive (eager); its columns at the keys' columns are gathered, and a key outside it (a token
    out of a sliding window) is masked. Without a mask (SDPA's causal shortcut: no padding) one query sees every
    key; several get an explicit causal mask over the columns (and ``window``).
    """
    start, stop = queries
    width = stop - start
    columns = held.visible_columns(width, batch, device)  # (B, K)
    if isinstance(mask, torch.Tensor):
        rows = mask[..., start:stop, :]
        rows = rows.expand(batch, *rows.shape[1:])  # (B, 1, W, KV)
        index = columns - mask_offset
        inside = (index >= 0) & (index < rows.shape[-1])  # (B, K)
        index = index.clamp(0, rows.shape[-1] - 1)[:, None, None, :].expand(-1, rows.shape[1], width, -1)
        gathered = rows.gather(-1, index)  # (B, 1, W, K)
        blocked = torch.tensor(False if mask.dtype == torch.bool else torch.finfo(mask.dtype).min,
                               dtype=mask.dtype, device=mask.device)
        return torch.where(inside[:, None, None, :], gathered, blocked)
    if mask is not None:
        raise UnsupportedModelError(f"POP cannot gather an attention mask of type {type(mask).__name__}")
    if width == 1:
        return None
    query = columns[:, -width:, None]  # (B, W, 1)
    allowed = columns[:, None, :] <= query  # (B, W, K)
    if window:
        allowed &= query - columns[:, None, :] < window
    return allowed[:, None]  # (B, 1, W, K)
