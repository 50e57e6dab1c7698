"""Energy per prefill: NVML's energy counter across blocks of repeated calls of one side, aligned on its steps.

The timed pairs alternate POP and the full model call by call, far faster than NVML's energy counter
updates, so energy cannot be split between the sides there. Each side is therefore run on its own in blocks
of back-to-back calls lasting at least ``min_seconds`` (1 s or more: the counter advances in steps, and a
shorter block would be mostly step). How a block is read:

- **Both ends on a step.** The counter moves in steps and lags the work (by up to about 100 ms). A block
  starts on a step reached while the side's calls already run (a busy lead-in, not counted) and ends on the
  first step after its last counted call, the calls going on until that step (counted). Both ends are then
  read in the same busy state, so the lag shifts a window of steady work instead of cutting off the end of the
  block; the block's seconds are step to step, on the timer's clock.
- **Blocks alternate.** :func:`energy_pair` runs at least :data:`ENERGY_BLOCKS` blocks per side in balanced
  order (POP, full, full, POP, POP, full, ...), so a drifting temperature or clock hits both sides alike; each
  side's joules per call is the median of its blocks with the order-statistic interval of
  :func:`poptune.measure.stats.median_ci` (three blocks: their range, coverage 0.75, stated as such).
- **Bounded run-ahead.** Inside a block the host does not wait for each call (that would add a sync the timed
  pairs never see), but it waits for the call :data:`RUN_AHEAD` calls back (a CUDA event recorded after each),
  so a replayed CUDA graph, which the host launches in microseconds, cannot queue thousands of calls that the
  block's last step would then wait for.
- **Idle power beside it.** :func:`idle_power` first lets the GPU settle (the work before it, a model build or a
  row, leaves it drawing more for a while: it waits at least :data:`SETTLE_MIN_S` and until the power stops
  falling, at most :data:`SETTLE_MAX_S`), then reads the counter across a block with no work (aligned the same
  way); each reading reports the gross joules per call and, beside it, the net figure: gross less idle
  power times the call's seconds (the energy the call added to what the idle GPU draws anyway).

Where the counter cannot be read, or blocks are turned off, the figures are ``None`` and ``reason`` says why.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from poptune.errors import ConfigError
from poptune.interval import Interval
from poptune.measure.nvml import NvmlDevice
from poptune.measure.stats import median_ci
from poptune.measure.timer import Timer

__all__ = ["ENERGY_BLOCKS", "MIN_BLOCK_SECONDS", "RUN_AHEAD", "SETTLE_MAX_S", "SETTLE_MIN_S", "EnergyBlock",
           "EnergyReading", "IdleReading", "check_block_seconds", "energy_pair", "energy_per_call", "idle_power"]

#: The shortest energy block that gives a figure: shorter ones are dominated by the counter's update steps.
MIN_BLOCK_SECONDS = 1.0

#: Blocks per side of :func:`energy_pair`: the fewest whose median has an interval (their range).
ENERGY_BLOCKS = 3

# How long to wait for the counter's next step at either end of a block (its update period is well under this).
_ALIGN_S = 0.5
_IDLE_POLL_S = 0.002  # the idle block's wait between two reads of the counter
_sleep = time.sleep  # how the idle block waits (a test's simulated clock replaces it)

#: Calls a block's host may run ahead of the device: before the next call it waits for the one this many back.
RUN_AHEAD = 2
#: The idle block's settling: at least this long after the device is synchronised ...
SETTLE_MIN_S = 1.0
#: ... and until the power stops falling (two readings :data:`_SETTLE_POLL_S` apart within
#: :data:`_SETTLE_FLAT` of each other), but no longer than this.
SETTLE_MAX_S = 5.0
_SETTLE_POLL_S = 0.25
_SETTLE_FLAT = 0.05


def _event() -> Any:
    """A CUDA event recorded on the current stream now (a test replaces this where there is no CUDA)."""
    import torch

    event = torch.cuda.Event()
    event.record()
    return event


class _RunAhead:
    """Keeps the host at most :data:`RUN_AHEAD` calls ahead of the device (a no-op on CPU, where calls block)."""

    def __init__(self, timer: Timer) -> None:
        self.on = timer.is_cuda
        self.pending: deque[Any] = deque()

    def after_call(self) -> None:
        if not self.on:
            return
        self.pending.append(_event())
        if len(self.pending) > RUN_AHEAD:
            self.pending.popleft().synchronize()  # the call RUN_AHEAD back has finished on the device


def check_block_seconds(seconds: float) -> None:
    """Raises ConfigError unless ``seconds`` is 0 (no energy blocks) or at least :data:`MIN_BLOCK_SECONDS`."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not (
        seconds == 0 or MIN_BLOCK_SECONDS <= seconds < float("inf")
    ):
        raise ConfigError(f"`energy_seconds` must be 0 (off) or >= {MIN_BLOCK_SECONDS:g}, got {seconds!r}")


@dataclass(frozen=True)
class EnergyBlock:
    """One block, step to step: ``calls`` counted, ``seconds`` between the steps, ``joules`` between them."""

    calls: int
    seconds: float
    joules: float

    def j_per_call(self) -> float:
        return self.joules / self.calls

    def net_j_per_call(self, idle_w: float) -> float:
        """Joules per call less what the idle GPU draws in the call's time."""
        return (self.joules - idle_w * self.seconds) / self.calls


@dataclass(frozen=True)
class IdleReading:
    """The GPU's power with no work, from one block aligned on the counter's steps (None with the reason)."""

    watts: float | None
    seconds: float = 0.0
    joules: float | None = None
    reason: str | None = None
    settle_seconds: float = 0.0  # waited before the block for the power to stop falling

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class EnergyReading:
    """One side's energy blocks.

    Attributes:
        j_per_call: Joules per call (per prefill): the median of the blocks', or None.
        per_call_ci: Its order-statistic interval (:class:`~poptune.interval.Interval`; its ``coverage`` is exact:
            0.75 for three blocks, their range), or None; stored as ``j_per_call_lo``, ``j_per_call_hi`` and
            ``coverage``.
        net_j_per_call: The median of the blocks' net joules per call (gross less ``idle_w`` times the call's
            seconds); None without an idle reading.
        idle_w: The idle power subtracted (W), or None.
        calls: Calls counted in all blocks; ``seconds``: their length, step to step; ``joules``: the counter's
            difference over them; ``watts``: joules over seconds.
        blocks: Each block as ``{calls, seconds, joules}``, in the order run.
        reason: Why there is no figure (None when there is one).
    """

    j_per_call: float | None
    calls: int = 0
    seconds: float = 0.0
    joules: float | None = None
    watts: float | None = None
    reason: str | None = None
    per_call_ci: Interval | None = None
    net_j_per_call: float | None = None
    idle_w: float | None = None
    blocks: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        data = {name: value for name, value in asdict(self).items() if name != "per_call_ci"}
        ci = self.per_call_ci
        return {**data, "j_per_call_lo": ci.lo if ci else None, "j_per_call_hi": ci.hi if ci else None,
                "coverage": ci.coverage if ci else None}


def _reason(gpu: NvmlDevice, default: str) -> str:
    return "; ".join(gpu.notes) or default


def _step(gpu: NvmlDevice, timer: Timer, fn: Callable[[], object] | None) -> tuple[int | None, int, int]:
    """Waits (at most ``_ALIGN_S``) for the counter's next step, calling ``fn`` meanwhile (device synchronised
    after each call) or, without ``fn``, waiting idle. Returns the counter's new value (None: no step came),
    the timer's clock then (ns) and the calls made."""
    first = gpu.energy_mj()
    start = timer.now_ns()
    calls = 0
    while first is not None and timer.now_ns() - start < _ALIGN_S * 1e9:
        if fn is None:
            _sleep(_IDLE_POLL_S)
        else:
            fn()
            timer.synchronize()
            calls += 1
        value = gpu.energy_mj()
        if value is None:
            return None, timer.now_ns(), calls
        if value != first:
            return value, timer.now_ns(), calls
    return None, timer.now_ns(), calls


def _block(fn: Callable[[], object] | None, gpu: NvmlDevice, timer: Timer, seconds: float) -> EnergyBlock | str:
    """One block of ``fn`` (None: idle) lasting at least ``seconds``, both ends on a step; or why not."""
    timer.synchronize()
    start_mj, start_ns, _ = _step(gpu, timer, fn)  # the lead-in's calls are not counted
    if start_mj is None:
        return _reason(gpu, f"energy counter did not step within {_ALIGN_S} s")
    calls, ahead = 0, _RunAhead(timer)
    while (fn is not None and calls == 0) or timer.now_ns() - start_ns < seconds * 1e9:
        if fn is None:
            _sleep(_IDLE_POLL_S)
        else:
            fn()
            ahead.after_call()
            calls += 1
    timer.synchronize()
    end_mj, end_ns, tail = _step(gpu, timer, fn)  # busy up to the step that ends the block: its calls count
    if end_mj is None:
        return _reason(gpu, f"energy counter did not step within {_ALIGN_S} s")
    joules = (end_mj - start_mj) / 1000.0
    if joules <= 0:
        return f"energy counter did not advance in {(end_ns - start_ns) / 1e9:.2f} s"
    return EnergyBlock(calls + tail, (end_ns - start_ns) / 1e9, joules)


def _unavailable(gpu: NvmlDevice, min_seconds: float) -> str | None:
    check_block_seconds(min_seconds)
    if min_seconds == 0:
        return "energy blocks off (energy_seconds=0)"
    if not gpu.available:
        return _reason(gpu, "NVML not available")
    return None


def _settle(gpu: NvmlDevice, timer: Timer) -> float:
    """Waits, device synchronised, at least :data:`SETTLE_MIN_S` and until the power draw stops falling (at
    most :data:`SETTLE_MAX_S`); returns the seconds waited."""
    timer.synchronize()
    start = timer.now_ns()
    before = None
    while True:
        _sleep(_SETTLE_POLL_S)
        waited = (timer.now_ns() - start) / 1e9
        power = gpu.power_w()
        flat = power is None or (before is not None and before - power <= _SETTLE_FLAT * before)
        if waited >= SETTLE_MAX_S or (waited >= SETTLE_MIN_S and flat):
            return waited
        before = power


def idle_power(gpu: NvmlDevice, timer: Timer, seconds: float = MIN_BLOCK_SECONDS) -> IdleReading:
    """The GPU's power with no work: the counter across ``seconds`` of waiting, both ends on a step, after the
    GPU has settled (:func:`_settle`). ``seconds`` as :func:`check_block_seconds` (0: not measured)."""
    why = _unavailable(gpu, seconds)
    if why is not None:
        return IdleReading(None, reason=why)
    settled = _settle(gpu, timer)
    block = _block(None, gpu, timer, seconds)
    if isinstance(block, str):
        return IdleReading(None, reason=block, settle_seconds=settled)
    return IdleReading(block.joules / block.seconds, block.seconds, block.joules, settle_seconds=settled)


def _reading(blocks: list[EnergyBlock], idle: IdleReading | None, confidence: float) -> EnergyReading:
    per_call = median_ci([b.j_per_call() for b in blocks], confidence)
    values = sorted(b.j_per_call() for b in blocks)
    idle_w = idle.watts if idle is not None else None
    net = None if idle_w is None else sorted(b.net_j_per_call(idle_w) for b in blocks)
    seconds, joules = sum(b.seconds for b in blocks), sum(b.joules for b in blocks)
    return EnergyReading(
        j_per_call=_median(values), calls=sum(b.calls for b in blocks), seconds=seconds, joules=joules,
        watts=joules / seconds, per_call_ci=per_call,
        net_j_per_call=None if net is None else _median(net), idle_w=idle_w, blocks=[asdict(b) for b in blocks])


def _median(ordered: list[float]) -> float:
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def energy_per_call(fn: Callable[[], object], *, gpu: NvmlDevice, timer: Timer,
                    min_seconds: float = MIN_BLOCK_SECONDS, blocks: int = 1,
                    idle: IdleReading | None = None) -> EnergyReading:
    """Runs ``fn`` in ``blocks`` blocks of at least ``min_seconds`` each and returns its joules per call.

    Args:
        fn: One side's call (a prefill), warmed up already.
        gpu: The open NVML view of the device ``fn`` runs on.
        timer: The device's timer (it synchronises the device; its clock times the blocks).
        min_seconds: Each block's least length: 0 turns blocks off, else at least :data:`MIN_BLOCK_SECONDS`.
        blocks: Blocks to run (the figure is their median).
        idle: The idle power to report the net figure against (None: no net figure).
    """
    return energy_pair(fn, None, gpu=gpu, timer=timer, min_seconds=min_seconds, blocks=blocks, idle=idle)["pop"]


def energy_pair(pop: Callable[[], object], full: Callable[[], object] | None, *, gpu: NvmlDevice, timer: Timer,
                min_seconds: float = MIN_BLOCK_SECONDS, blocks: int = ENERGY_BLOCKS, idle: IdleReading | None = None,
                confidence: float = 0.95) -> dict[str, EnergyReading]:
    """Joules per call of two sides from ``blocks`` blocks each, alternated POP, full, full, POP, ...

    Returns ``{"pop": reading, "full": reading}`` (only ``pop`` when ``full`` is None); each reading is the
    median of its blocks with its interval at ``confidence`` and, given ``idle``, the net figure. Arguments as
    :func:`energy_per_call`.
    """
    sides = {"pop": pop} if full is None else {"pop": pop, "full": full}
    why = _unavailable(gpu, min_seconds)
    if why is not None:
        return {name: EnergyReading(None, reason=why) for name in sides}
    runs: dict[str, list[EnergyBlock]] = {name: [] for name in sides}
    names = list(sides)
    for index in range(blocks):
        for name in names if index % 2 == 0 else names[::-1]:
            block = _block(sides[name], gpu, timer, min_seconds)
            if isinstance(block, str):
                return {side: EnergyReading(None, reason=block) for side in sides}
            runs[name].append(block)
    return {name: _reading(runs[name], idle, confidence) for name in sides}
