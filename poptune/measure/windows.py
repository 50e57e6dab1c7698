"""Sliding-window sizes kept on the device while timing: no host-to-device copy per prefill and layer.

Under transformers 5.24 a sliding-window cache layer (``DynamicSlidingWindowLayer``, Gemma-3's local layers) makes
its window size a CPU tensor when the cache is made and copies it to the device the first time the layer is
written (its lazy initialisation). A prefill makes a new cache, so each prefill pays one small host-to-device
copy per sliding layer (40 of Gemma-3-12B's 48), on both sides of a pair: fixed costs that pull a short row's
speedup towards 1, and a copy a CUDA graph capture refuses. Inside :func:`window_sizes_on_device` each layer
takes its window size from tensors made on the device once, when the block is entered (outside any timed
call); the lazy initialisation's ``.to(device)`` then has nothing to copy. Outside the block transformers runs
as it ships. Models without sliding layers, and transformers versions without this layer, are left alone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

__all__ = ["window_sizes_on_device"]


def _windows(model: Any) -> set[int]:
    config = model.config
    sizes = set()
    for level in (config, getattr(config, "text_config", None)):
        window = getattr(level, "sliding_window", None) if level is not None else None
        if isinstance(window, int) and window > 0:
            sizes.add(window)
    return sizes


@contextlib.contextmanager
def window_sizes_on_device(model: Any) -> Iterator[dict[tuple[int, torch.device], torch.Tensor]]:
    """While the block runs, sliding cache layers of ``model``'s device read their window size from a tensor
    made there once (made now for the sizes ``model``'s config names). Yields those tensors by (size, device)."""
    try:
        from transformers import cache_utils
    except ImportError:  # pragma: no cover - transformers is a dependency
        yield {}
        return
    layer = getattr(cache_utils, "DynamicSlidingWindowLayer", None)
    original = getattr(layer, "lazy_initialization", None)
    if layer is None or original is None:
        yield {}
        return
    device = next(model.parameters()).device
    made = {(w, device): torch.tensor(w, dtype=torch.long, device=device) for w in _windows(model)}

    def lazy_initialization(self: Any, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        key = (int(self.sliding_window), key_states.device)
        if key not in made:  # a size the config did not name: made once, at its first use
            made[key] = torch.tensor(key[0], dtype=torch.long, device=key[1])
        self._sliding_window_tensor = made[key]
        original(self, key_states, value_states)

    own = "lazy_initialization" in vars(layer)
    layer.lazy_initialization = lazy_initialization
    try:
        yield made
    finally:
        if own:
            layer.lazy_initialization = original
        else:
            del layer.lazy_initialization
