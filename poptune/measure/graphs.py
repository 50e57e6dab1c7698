"""Timing with CUDA graphs: a side's prefill captured once and replayed, so the timer sees the GPU's work only.

A small model on a fast GPU finishes its kernels before Python has launched the next ones: eager timing then
measures dispatch, and POP's skipped layers, which launch their own K/V kernels, can time slower than the
full model although they compute less. A CUDA graph replays the captured kernels with one launch. It applies
where one call has fixed shapes and no host synchronisation: a text prompt's prefill (static input tensors,
a new cache allocated in the graph's own memory pool at every replay). It does not apply to decode (the cache
grows every step, so each step has other shapes; decode is timed eagerly) nor on CPU; where capture fails (a
model that reads a tensor on the host mid-forward, as image prompts may) the side is timed eagerly and the
error is recorded as the reason. ``torch.compile`` is not offered: POP swaps forwards at every call, which
would recompile or fall back, and compiling an 8B model per shape takes minutes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

__all__ = ["DECODE_EAGER", "Graphed", "capture"]

#: Why decode is always timed eagerly.
DECODE_EAGER = "decode timed eagerly: the cache grows every step, so no two steps have the same shapes"

_WARMUP = 3  # eager calls on a side stream before capture (lazy initialisation, cuBLAS workspaces)


@dataclass(frozen=True)
class Graphed:
    """A side prepared for timing: ``call`` replays its graph, or runs it eagerly where ``reason`` says why."""

    call: Callable[[], object]
    graph: object | None = None  # the torch.cuda.CUDAGraph, kept alive with its memory pool
    reason: str | None = None

    @property
    def mode(self) -> str:
        """``cuda-graph`` or ``eager``."""
        return "cuda-graph" if self.graph is not None else "eager"


def capture(fn: Callable[[], object], device: torch.device) -> Graphed:
    """Captures ``fn()`` in a CUDA graph on ``device``; falls back to ``fn`` itself with the reason.

    ``fn`` must read the same input tensors at every call (they are baked into the graph by address).
    """
    if device.type != "cuda":
        return Graphed(fn, reason="CUDA graphs need a CUDA device: timed eagerly")
    try:
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(_WARMUP):
                fn()
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
    except Exception as e:  # any capture failure means: this call cannot be a graph; say why and go eager
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
        torch.cuda.synchronize(device)
        return Graphed(fn, reason=f"CUDA graph capture failed ({type(e).__name__}: {first}): timed eagerly")
    return Graphed(graph.replay, graph=graph)
