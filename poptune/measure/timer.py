"""The one timing implementation of poptune: a timer, a repeat loop and JSON-serialisable latency records.

Every latency is in milliseconds. On CUDA each timed call is bracketed by a pair of CUDA events recorded on
the current stream and the device is synchronised only when values are read (once, after the loop); on CPU
the host clock (``time.perf_counter_ns``) brackets each call. The records live in
:mod:`poptune.measure.records`, the order-statistic intervals of the median in :mod:`poptune.measure.stats`.

Two functions timed as pairs run in balanced blocks: each two consecutive pairs are A-B then B-A (in a random
order, a seeded coin picks which comes first within each block), so load that drifts over a block hits both
sides alike; a precision rule judges the interval only on complete blocks, and never on fewer pairs than can
reach its confidence (:func:`~poptune.measure.stats.pairs_for`: 6 at 95%). Python's garbage collector is off
during the timed rounds (:func:`gc_off`) and restored after.
"""

from __future__ import annotations

import contextlib
import gc
import math
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import torch

from poptune import progress
from poptune.device import resolve_device
from poptune.errors import ConfigError
from poptune.measure.records import ORDERS, LatencyRecord, PairRecord, percentile
from poptune.measure.stats import median_ci, pairs_for

__all__ = [
    "ORDERS",
    "LatencyRecord",
    "PairRecord",
    "RepeatPolicy",
    "Staged",
    "Timer",
    "gc_off",
    "measure",
    "measure_pair",
    "percentile",
]

Clock = Callable[[], int]
"""A monotonic host clock returning nanoseconds, like :func:`time.perf_counter_ns`."""


def _check_int(name: str, value: object, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"`{name}` must be an integer, got {value!r}")
    if value < minimum:
        raise ConfigError(f"`{name}` must be >= {minimum}, got {value}")


@dataclass(frozen=True)
class RepeatPolicy:
    """How often to call a function (or a pair) when timing it: the one stopping rule of poptune.

    After ``warmup`` untimed rounds (and on until ``warmup_seconds`` passed, so a GPU's clocks ramp up), timed
    rounds continue until ``min_repeats`` rounds were made, ``min_seconds`` of host wall-clock time passed since
    the first timed round and, with ``precision``, the ``confidence`` interval of the median (of per-pair ratios
    for a pair; of latencies for one function) is no wider than ``+-precision`` of it -- but never beyond
    ``max_repeats`` rounds or ``max_seconds``. With ``precision`` the interval is judged from
    ``pairs_for(confidence)`` rounds on (6 at 95%: fewer cannot reach the confidence, see
    :mod:`poptune.measure.stats`), and for a pair in ``alternate`` or ``random`` order only after a complete
    A-B/B-A block. On CUDA the wall clock counts host time, which may run ahead of the GPU by the launch queue
    (a precision check synchronises).

    Attributes:
        warmup: Untimed rounds first (compilation, caches, clock ramp-up).
        warmup_seconds: Least wall-clock time of the untimed rounds, device synchronised (0: rounds only).
        min_repeats: Fewest timed rounds.
        min_seconds: Least wall-clock time of the timed loop, in seconds.
        max_repeats: Most timed rounds; wins over every other condition.
        precision: Relative half-width to reach (0.02 = +-2%), or None to stop at the minimums.
        max_seconds: Most seconds of the timed loop while chasing ``precision`` (None: no time cap).
        order: Pair order: ``alternate`` (A-B, B-A, ...), ``random`` (blocks of A-B and B-A, which first a
            seeded coin says) or ``fixed`` (A first always).
        seed: Seed of a random order.
        confidence: Level of the intervals (order-statistic intervals of the median: exact, not seeded).
    """

    warmup: int = 2
    min_repeats: int = 5
    min_seconds: float = 1.0
    max_repeats: int = 1000
    precision: float | None = None
    max_seconds: float | None = None
    order: str = "alternate"
    seed: int = 0
    confidence: float = 0.95
    warmup_seconds: float = 0.0

    def __post_init__(self) -> None:
        _check_int("warmup", self.warmup, 0)
        _check_int("min_repeats", self.min_repeats, 1)
        _check_int("max_repeats", self.max_repeats, self.min_repeats)
        _check_int("seed", self.seed, 0)
        for name in ("min_seconds", "warmup_seconds", "max_seconds", "precision"):
            value = getattr(self, name)
            if value is None and name not in ("min_seconds", "warmup_seconds"):
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ConfigError(f"`{name}` must be a finite number, got {value!r}")
            if value < 0 or (name == "precision" and value == 0):
                raise ConfigError(f"`{name}` must be {'> 0' if name == 'precision' else '>= 0'}, got {value}")
        if self.order not in ORDERS:
            raise ConfigError(f"`order` must be one of {', '.join(ORDERS)}, got {self.order!r}")
        if not 0.0 < self.confidence < 1.0:
            raise ConfigError(f"`confidence` must be in (0, 1), got {self.confidence}")

    def to_dict(self) -> dict[str, Any]:
        """All fields, JSON-serialisable (:meth:`from_dict` reads records made before the newer fields)."""
        return dict(vars(self))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RepeatPolicy:
        """Rebuilds a policy from :meth:`to_dict` output."""
        return cls(**dict(data))


class Timer:
    """Times single calls on one device.

    Args:
        device: ``"cpu"``, ``"cuda"`` or ``"cuda:N"`` (or a ``torch.device``).
        clock: Host clock in nanoseconds (default ``time.perf_counter_ns``). It times CPU calls and the
            repeat loop's wall clock; inject a fake one to test timing logic without real time.

    Raises:
        ConfigError: ``device`` is malformed or not CPU/CUDA.
        DeviceError: CUDA is asked for but not available.
    """

    def __init__(self, device: str | torch.device = "cpu", *, clock: Clock | None = None) -> None:
        self.device = resolve_device(device)
        self.clock: Clock = clock if clock is not None else time.perf_counter_ns

    @property
    def is_cuda(self) -> bool:
        """Whether calls are timed with CUDA events."""
        return self.device.type == "cuda"

    def now_ns(self) -> int:
        """Reads the host clock (ns)."""
        return self.clock()

    def synchronize(self) -> None:
        """Waits for queued work on the device (a no-op on CPU)."""
        if self.is_cuda:
            torch.cuda.synchronize(self.device)

    def time_call(self, fn: Callable[[], object]) -> object:
        """Calls ``fn()`` once and returns an opaque pending measurement for :meth:`read`."""
        if self.is_cuda:
            stream = torch.cuda.current_stream(self.device)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(stream)
            fn()
            end.record(stream)
            return (start, end)
        t0 = self.clock()
        fn()
        return (self.clock() - t0) / 1e6

    def read(self, pending: Sequence[Any]) -> list[float]:
        """Turns pending measurements into milliseconds, synchronising the device once on CUDA."""
        if not self.is_cuda:
            return [float(p) for p in pending]
        self.synchronize()
        return [float(start.elapsed_time(end)) for start, end in pending]


@dataclass(frozen=True)
class Staged:
    """A timed call that needs untimed preparation each time: ``run(setup())`` with only ``run`` timed.

    Example: decode latency from a fresh prefilled cache per repeat, the prefill being ``setup``.
    """

    setup: Callable[[], Any]
    run: Callable[[Any], object]


Timed = Callable[[], object] | Staged


def _call(fn: Timed, timer: Timer) -> object:
    if isinstance(fn, Staged):
        state = fn.setup()
        return timer.time_call(lambda: fn.run(state))
    return timer.time_call(fn)


def _orders(policy: RepeatPolicy, count: int) -> list[str]:
    """The order of each of ``count`` pairs: ``"ab"`` or ``"ba"``, in balanced blocks of two unless ``fixed``."""
    if policy.order == "fixed":
        return ["ab"] * count
    if policy.order == "alternate":
        return ["ab" if i % 2 == 0 else "ba" for i in range(count)]
    rng = random.Random(policy.seed)
    blocks = [("ab", "ba") if rng.random() < 0.5 else ("ba", "ab") for _ in range((count + 1) // 2)]
    return [order for block in blocks for order in block][:count]


def _precise(timed: list[list[float]], policy: RepeatPolicy) -> bool:
    """Whether the interval of the median (per-pair ratio, or latency of one function) is narrow enough."""
    first, *second = timed
    samples = [b / a for a, b in zip(first, second[0])] if second else first
    assert policy.precision is not None  # asked only while chasing a precision
    return median_ci(samples, policy.confidence).relative_half_width() <= policy.precision


@dataclass
class _Rounds:
    """What the repeat loop returns: values per function, in round order, and when each round ran."""

    values: list[list[float]]
    orders: list[str]
    offsets_s: list[float]
    started: float


def _repeat(fns: Sequence[Timed], timer: Timer, policy: RepeatPolicy,
            during: AbstractContextManager[Any] | None = None) -> _Rounds:
    """Runs the one repeat loop: warm-up rounds, then timed rounds (a pair's order per ``policy.order``), inside
    ``during`` (entered after the warm-up, left once the timed work finished on the device)."""
    orders = _orders(policy, policy.max_repeats)
    warm_ns = policy.warmup_seconds * 1e9
    warm_start, i = timer.now_ns() if warm_ns else 0, 0
    while i < policy.warmup or (warm_ns and timer.now_ns() - warm_start < warm_ns):
        for fn in fns if orders[i % len(orders)] == "ab" else fns[::-1]:
            _call(fn, timer)
        if policy.warmup_seconds:
            timer.synchronize()  # the GPU's time, not the host's run-ahead, is what warms its clocks
        i += 1
    timer.synchronize()  # so the timed loop's wall clock does not start with warm-up work still queued
    least = policy.min_repeats
    if policy.precision is not None:  # fewer pairs' interval is their range, short of its confidence
        least = max(least, pairs_for(policy.confidence))
    with during if during is not None else contextlib.nullcontext(), gc_off():
        rounds, offsets, started, values = _timed(fns, timer, policy, orders, least)
    used = [o if len(fns) > 1 else "ab" for o in orders[:rounds]]
    return _Rounds(values, used, offsets, started)


@contextlib.contextmanager
def gc_off() -> Iterator[None]:
    """Python's garbage collector off within (a collection inside a timed call is the host's, not the work's),
    restored after to what it was."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _timed(fns: Sequence[Timed], timer: Timer, policy: RepeatPolicy, orders: list[str],
           least: int) -> tuple[int, list[float], float, list[list[float]]]:
    """The timed rounds of :func:`_repeat`: their count, start offsets (s), wall-clock start and values (ms)."""
    pending: list[list[object]] = [[] for _ in fns]
    min_ns = policy.min_seconds * 1e9
    blocks = len(fns) == 2 and policy.order != "fixed"  # judge a pair's interval on whole A-B/B-A blocks
    max_ns = None if policy.max_seconds is None else policy.max_seconds * 1e9
    started, start = time.time(), timer.now_ns()
    offsets: list[float] = []
    rounds = 0
    while rounds < policy.max_repeats:
        order = orders[rounds]
        offsets.append((timer.now_ns() - start) / 1e9)
        for index in (range(len(fns)) if order == "ab" else reversed(range(len(fns)))):
            pending[index].append(_call(fns[index], timer))
        rounds += 1
        progress.advance()  # one pair (outside the timed calls)
        elapsed = timer.now_ns() - start
        if rounds < least or elapsed < min_ns:
            continue
        if policy.precision is None or (max_ns is not None and elapsed >= max_ns):
            break
        if blocks and rounds % 2:
            continue
        if _precise([timer.read(bucket) for bucket in pending], policy):
            break
    return rounds, offsets, started, [timer.read(bucket) for bucket in pending]  # read: the device synchronised


def measure(fn: Timed, *, timer: Timer, policy: RepeatPolicy | None = None,
            during: AbstractContextManager[Any] | None = None) -> LatencyRecord:
    """Times repeated calls of ``fn()`` (or of a :class:`Staged` call) under ``policy`` (default
    :class:`RepeatPolicy()`).

    ``during`` (e.g. a telemetry :class:`~poptune.measure.telemetry.Sampler`) is entered around the timed
    rounds only, not the warm-up.

    Example:
        >>> rec = measure(lambda: x @ x, timer=Timer("cpu"), policy=RepeatPolicy(min_seconds=0.1))
        >>> rec.p50  # milliseconds
    """
    (values,) = _repeat([fn], timer, policy or RepeatPolicy(), during).values
    return LatencyRecord(values_ms=values)


def measure_pair(
    fn_a: Timed,
    fn_b: Timed,
    *,
    timer: Timer,
    policy: RepeatPolicy | None = None,
    during: AbstractContextManager[Any] | None = None,
) -> PairRecord:
    """Times ``fn_a`` and ``fn_b`` as pairs, one right after the other, so drift in clocks or load hits both alike.

    Pairs run in balanced blocks, A-B then B-A (``policy.order``: or each block's order by a seeded coin, or A
    first always), so neither side always runs second on a warmer cache and load drifting over a block hits
    both alike; warm-up pairs follow the same order. A repeat of the policy is one pair; with
    ``policy.precision`` pairs continue until the interval of the speedup is that narrow (judged on whole
    blocks, from ``pairs_for(policy.confidence)`` pairs on, within the caps). The result's ``speedup`` is the
    median of per-pair ``b / a``: pass the POP configuration as A and the full model as B. Each pair's order and
    start time are kept in the record. ``during`` (e.g. a telemetry sampler) is entered around the timed pairs
    only: after the warm-up, until the device finished them.
    """
    policy = policy or RepeatPolicy()
    rounds = _repeat([fn_a, fn_b], timer, policy, during)
    values_a, values_b = rounds.values
    return PairRecord(a=LatencyRecord(values_ms=values_a), b=LatencyRecord(values_ms=values_b), order=rounds.orders,
                      offsets_s=rounds.offsets_s, started=rounds.started, confidence=policy.confidence,
                      seed=policy.seed)
