"""One profiler pass per model: kernels per full-model prefill and the share of its latency the GPU was busy.

A prefill whose kernels fill less than :data:`~poptune.gpucheck.plan.LAUNCH_BOUND_BUSY` of its latency is
launch-bound: its latency is Python dispatch and kernel launches, not compute, and its speedup says little
about POP. Each row's shape is profiled once (full model, one call). The busy time (kernels' union on the
GPU's clock) is divided by the row's timed p50, not by the profiled call's wall time, which the profiler's
own overhead inflates.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from poptune.gpucheck.plan import LAUNCH_BOUND_BUSY

__all__ = ["NO_EVENTS", "busy_union", "launch_bound", "profile_call"]

#: Why a CUDA row's GPU-busy share is unknown: the profiler delivered no CUDA events for its call.
NO_EVENTS = ("the profiler delivered no CUDA events (CUPTI unavailable here, as in some VMs): GPU busy unknown, "
             "no launch-bound label")


def busy_union(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by ``intervals`` (overlaps counted once), in their unit."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def profile_call(fn: Callable[[], Any], device: torch.device) -> dict[str, Any]:
    """Kernels launched by one ``fn()`` call and the time at least one ran (ms); on CPU, the reason instead."""
    if device.type != "cuda":
        return {"kernels": None, "kernel_ms": None, "reason": f"{device} device: no GPU kernels to profile"}
    from torch.profiler import ProfilerActivity, profile

    fn()  # warm: the profiled call is an ordinary one, not the first
    torch.cuda.synchronize(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize(device)
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    if not kernels:  # CUPTI gave no device events (a VM may hide them): busy is unknown, not zero (issue 59)
        return {"kernels": None, "kernel_ms": None, "reason": NO_EVENTS}
    busy_us = busy_union([(e.time_range.start, e.time_range.end) for e in kernels])
    return {"kernels": len(kernels), "kernel_ms": busy_us / 1000, "reason": None}


def launch_bound(profiled: dict[str, Any], latency_ms: float) -> dict[str, Any]:
    """``profiled`` with the GPU-busy fraction of ``latency_ms`` and the launch-bound label (None on CPU)."""
    if profiled.get("kernel_ms") is None:
        return {**profiled, "busy": None, "launch_bound": None}
    busy = min(profiled["kernel_ms"] / latency_ms, 1.0)
    return {**profiled, "busy": busy, "launch_bound": busy < LAUNCH_BOUND_BUSY}
