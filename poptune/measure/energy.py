"""Energy per prefill: NVML's energy counter across a block of repeated calls of one side, at least 1 s long.

The timed pairs alternate POP and the full model call by call, far faster than NVML's energy counter
updates, so energy cannot be split between the sides there. Each side is therefore run on its own in a block
of back-to-back calls lasting at least ``min_seconds`` (1 s or more: the counter advances in steps, and a
shorter block would be mostly step); the block starts on a step of the counter, and the joules of the block
divided by its calls are the joules per prefill. Where the counter cannot be read, or blocks are turned off,
the figure is ``None`` and ``reason`` says why.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from poptune.errors import ConfigError
from poptune.measure.nvml import NvmlDevice
from poptune.measure.timer import Timer

__all__ = ["MIN_BLOCK_SECONDS", "EnergyReading", "check_block_seconds", "energy_per_call"]

#: The shortest energy block that gives a figure: shorter ones are dominated by the counter's update steps.
MIN_BLOCK_SECONDS = 1.0

# How long to wait for the counter's next step before a block starts (its update period is well under this).
_ALIGN_S = 0.5


def check_block_seconds(seconds: float) -> None:
    """Raises ConfigError unless ``seconds`` is 0 (no energy blocks) or at least :data:`MIN_BLOCK_SECONDS`."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not (
        seconds == 0 or MIN_BLOCK_SECONDS <= seconds < float("inf")
    ):
        raise ConfigError(f"`energy_seconds` must be 0 (off) or >= {MIN_BLOCK_SECONDS:g}, got {seconds!r}")


@dataclass(frozen=True)
class EnergyReading:
    """One side's energy block.

    Attributes:
        j_per_call: Joules per call (per prefill), or None.
        calls: Calls in the block; ``seconds``: its wall-clock length (device synchronised at both ends).
        joules: The counter's difference across the block; ``watts``: joules over seconds.
        reason: Why there is no figure (None when there is one).
    """

    j_per_call: float | None
    calls: int = 0
    seconds: float = 0.0
    joules: float | None = None
    watts: float | None = None
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _next_step(gpu: NvmlDevice) -> int | None:
    """Waits (at most ``_ALIGN_S``) for the energy counter to change and returns its new value."""
    first = gpu.energy_mj()
    deadline = time.perf_counter() + _ALIGN_S
    value = first
    while value == first and first is not None and time.perf_counter() < deadline:
        value = gpu.energy_mj()
    return value


def energy_per_call(fn: Callable[[], object], *, gpu: NvmlDevice, timer: Timer,
                    min_seconds: float = MIN_BLOCK_SECONDS) -> EnergyReading:
    """Runs ``fn`` back to back for at least ``min_seconds`` and returns the joules per call.

    Args:
        fn: One side's call (a prefill), warmed up already.
        gpu: The open NVML view of the device ``fn`` runs on.
        timer: The device's timer (it synchronises the device around the block).
        min_seconds: The block's least length: 0 turns blocks off, else at least :data:`MIN_BLOCK_SECONDS`.
    """
    check_block_seconds(min_seconds)
    if min_seconds == 0:
        return EnergyReading(None, reason="energy blocks off (energy_seconds=0)")
    if not gpu.available:
        return EnergyReading(None, reason="; ".join(gpu.notes) or "NVML not available")
    timer.synchronize()
    start_mj = _next_step(gpu)
    if start_mj is None:
        return EnergyReading(None, reason="; ".join(gpu.notes) or "energy counter unavailable")
    start, calls = time.perf_counter(), 0
    while calls == 0 or time.perf_counter() - start < min_seconds:
        fn()
        calls += 1
    timer.synchronize()
    seconds = time.perf_counter() - start
    end_mj = gpu.energy_mj()
    if end_mj is None:
        return EnergyReading(None, calls, seconds, reason="; ".join(gpu.notes) or "energy counter unavailable")
    joules = (end_mj - start_mj) / 1000.0
    if joules <= 0:
        return EnergyReading(None, calls, seconds, joules, reason=f"energy counter did not advance in {seconds:.2f} s")
    return EnergyReading(joules / calls, calls, seconds, joules, joules / seconds)
