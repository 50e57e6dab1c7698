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

**Masks.** While a stream is capturing, transformers refuses SDPA's causal shortcut (it cannot read the mask
on the host) and builds a dense 4-D mask, so SDPA would compute every query-key pair, masked ones too: not
the kernels eager timing runs, nor what the FLOPs ideal counts. :func:`graph_inputs` therefore drops the
attention mask of a text prompt without padding (checked once, on the host, before capture): with no mask
transformers takes the causal path under capture as it does eagerly. A prompt with padding, or an image
prompt, keeps its mask: its graph computes the full square, and the row's ideal counts it so
(:func:`poptune.measure.flops.prefill_flops`, ``materialised``). What SDPA really received during the capture is
recorded (:func:`sdpa_calls`, :attr:`Graphed.sdpa`) and labels the row (:func:`mask_label`), so a transformers
version that builds the square anyway (issue 59: ``is_tracing`` counts a capturing stream) is reported as
``materialised``, not as the causal path the inputs asked for.

**A failed capture** is ended on the spot (the stream leaves capture mode) and the caching allocator is handed
back from the capture's private pool, and the pool released, so later allocations and ``empty_cache()`` behave
as if no capture had been tried. The pool is made here (``torch.cuda.graph_pool_handle()``) and given to
``capture_begin(pool=...)``, so its handle is known whatever the capture did: ``CUDAGraph.pool()`` cannot be
asked after a failed ``capture_end`` (it checks that the capture ended, which a failed end never records).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["DECODE_EAGER", "Graphed", "capture", "graph_inputs", "mask_label", "mask_materialised", "sdpa_calls"]

#: Why decode is always timed eagerly.
DECODE_EAGER = "decode timed eagerly: the cache grows every step, so no two steps have the same shapes"

_WARMUP = 3  # eager calls on a side stream before capture (lazy initialisation, cuBLAS workspaces)

_TEXT_KEYS = frozenset({"input_ids", "attention_mask", "position_ids"})


@dataclass(frozen=True)
class Graphed:
    """A side prepared for timing: ``call`` replays its graph, or runs it eagerly where ``reason`` says why."""

    call: Callable[[], object]
    graph: object | None = None  # the torch.cuda.CUDAGraph, kept alive with its memory pool
    reason: str | None = None
    sdpa: tuple[str, ...] = ()  # what SDPA received during the capture (:func:`sdpa_calls`), each kind once

    @property
    def mode(self) -> str:
        """``cuda-graph`` or ``eager``."""
        return "cuda-graph" if self.graph is not None else "eager"


def graph_inputs(inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The inputs a captured prefill reads: ``inputs`` without ``attention_mask`` where it is all ones and the
    prompt is text only (see the module docstring); otherwise ``inputs`` unchanged (a new dict).

    Reads the mask on the host once: call it before capture, never inside.
    """
    mask = inputs.get("attention_mask")
    text_only = set(inputs) <= _TEXT_KEYS
    if mask is None or not text_only or not bool(mask.bool().all()):
        return dict(inputs)
    return {k: v for k, v in inputs.items() if k != "attention_mask"}


def mask_materialised(inputs: Mapping[str, torch.Tensor]) -> bool:
    """Whether a captured prefill of ``inputs`` gets a materialised 4-D mask (it passes one to transformers)."""
    return inputs.get("attention_mask") is not None


@contextlib.contextmanager
def sdpa_calls() -> Iterator[list[str]]:
    """Records what ``torch.nn.functional.scaled_dot_product_attention`` receives while the block runs, one entry
    per call: ``mask`` (a materialised mask: the full square is computed), ``causal`` (no mask, ``is_causal``: the
    causal kernels) or ``full`` (neither). transformers' SDPA attention looks the function up at every call, so the
    recording sees what the model passes; only Python runs here, so it is safe inside a capture."""
    functional = torch.nn.functional
    original = functional.scaled_dot_product_attention
    seen: list[str] = []

    def recording(*args: Any, **kwargs: Any) -> Any:
        mask = kwargs.get("attn_mask", args[3] if len(args) > 3 else None)
        causal = kwargs.get("is_causal", args[5] if len(args) > 5 else False)
        seen.append("mask" if mask is not None else "causal" if causal else "full")
        return original(*args, **kwargs)

    functional.scaled_dot_product_attention = recording
    try:
        yield seen
    finally:
        functional.scaled_dot_product_attention = original


def mask_label(sdpa: tuple[str, ...] | list[str], inputs: Mapping[str, torch.Tensor]) -> str:
    """A captured prefill's mask as it ran: ``materialised`` where SDPA received a mask during the capture (or,
    with no SDPA call recorded, where the inputs carry one), else ``none (causal path)``."""
    if sdpa:
        return "materialised" if "mask" in sdpa else "none (causal path)"
    return "materialised" if mask_materialised(inputs) else "none (causal path)"


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:200]}" if text else type(e).__name__


def _abandon(pool: Any, device: torch.device) -> None:
    """Hands the caching allocator back from the private ``pool`` of a failed capture and releases the pool.

    Each step is suppressed where torch did it already (``capture_end`` stops routing allocations to the pool
    before it checks the capture; a capture that never began routed nothing).
    """
    index = device.index if device.index is not None else torch.cuda.current_device()
    end = getattr(torch._C, "_cuda_endAllocateToPool", None)
    release = getattr(torch._C, "_cuda_releasePool", None)
    if end is not None:
        with contextlib.suppress(Exception):
            end(index, pool)
    if release is not None:
        with contextlib.suppress(Exception):
            release(index, pool)


def _record(graph: Any, fn: Callable[[], object], stream: Any, device: torch.device) -> BaseException | None:
    """Captures ``fn()`` into ``graph`` on ``stream``, in a private pool made first; the capture is ended
    whatever ``fn`` does. Returns the first error (``fn``'s before ``capture_end``'s), or None for a graph
    ready to replay (it then owns the pool)."""
    failure: BaseException | None = None
    pool = torch.cuda.graph_pool_handle()
    with torch.cuda.stream(stream):
        try:
            # thread_local: the NVML sampler's thread is not captured
            graph.capture_begin(pool=pool, capture_error_mode="thread_local")
        except Exception as e:  # noqa: BLE001 -- returned: the caller times eagerly and says why
            _abandon(pool, device)
            return e
        try:
            fn()
        except Exception as e:  # noqa: BLE001 -- returned after the capture is ended
            failure = e
        try:
            graph.capture_end()
        except Exception as e:  # noqa: BLE001 -- the graph holds nothing: the pool is ours to hand back
            failure = failure or e
            _abandon(pool, device)
    return failure  # after a successful end the graph owns the pool and releases it when it is freed


def capture(fn: Callable[[], object], device: torch.device) -> Graphed:
    """Captures ``fn()`` in a CUDA graph on ``device``; falls back to ``fn`` itself with the reason.

    ``fn`` is called :data:`_WARMUP` times eagerly on a side stream first (lazy initialisation, workspaces, and
    the checks a capture cannot make, such as the engine's left-padding check). ``fn`` must read the same input
    tensors at every call (they are baked into the graph by address).
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
        torch.cuda.synchronize(device)
    except Exception as e:  # noqa: BLE001 -- the call fails eagerly too: nothing to capture
        return Graphed(fn, reason=f"eager warm-up before capture failed ({_first_line(e)}): timed eagerly")
    graph = torch.cuda.CUDAGraph()
    with sdpa_calls() as seen:
        error = _record(graph, fn, side, device)
    if error is not None:
        with contextlib.suppress(Exception):
            torch.cuda.synchronize(device)
        return Graphed(fn, reason=f"CUDA graph capture failed ({_first_line(error)}): timed eagerly")
    return Graphed(graph.replay, graph=graph, sdpa=tuple(sorted(set(seen))))
