"""What is timed: the prefill of a prompt, up to the first token's logits, with or without POP."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from poptune.engine import PopConfig, apply_pop, remove_pop

__all__ = ["prefill_call"]


def prefill_call(model: Any, inputs: Mapping[str, torch.Tensor], config: PopConfig | None) -> Callable[[], Any]:
    """A no-argument call running one prefill of ``inputs`` and returning the first token's logits.

    ``config=None`` runs the plain model; otherwise POP with ``config`` (applied for the call, removed after,
    so calls for several configurations can be interleaved on one model). Only the last position's logits
    are computed, as ``generate`` does, so the full model is not charged for logits POP never produces.
    """

    @torch.inference_mode()
    def call() -> torch.Tensor:
        if config is not None:
            apply_pop(model, config)
        try:
            return model(**inputs, use_cache=True, logits_to_keep=1).logits[:, -1]  # (B, V)
        finally:
            if config is not None:
                remove_pop(model)

    return call
