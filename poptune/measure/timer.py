"""The one timing implementation of poptune: a timer, a repeat loop and JSON-serialisable latency records.

Every latency is in milliseconds. On CUDA each timed call is bracketed by a pair of CUDA events recorded on
the current stream and the device is synchronised only when values are read (once, after the loop); on CPU
the host clock (``time.perf_counter_ns``) brackets each call.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from poptune.device import resolve_device
from poptune.errors import ConfigError

__all__ = [
    "LatencyRecord",
    "PairRecord",
    "RepeatPolicy",
    "Staged",
    "Timer",
    "measure",
    "measure_pair",
    "percentile",
]

Clock = Callable[[], int]
"""A monotonic host clock returning nanoseconds, like :func:`time.perf_counter_ns`."""


def percentile(values: Sequence[float], q: float) -> float:
    """Returns the ``q``-th percentile with linear interpolation (numpy's default method).

    Example: ``percentile([1, 2, 3, 4], 50) == 2.5``; ``percentile([1, 2, 3, 4], 90) == 3.7``.
    """
    if not values:
        raise ConfigError("`values` must hold at least one value, got none")
    if not 0.0 <= q <= 100.0:
        raise ConfigError(f"`q` must be in [0, 100], got {q}")
    ordered = sorted(values)
    rank = q / 100.0 * (len(ordered) - 1)
    lo, hi = math.floor(rank), math.ceil(rank)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


@dataclass
class LatencyRecord:
    """Raw latencies of repeated calls, in milliseconds, with summary statistics.

    Attributes:
        values_ms: One latency per measured call, in call order (warm-up calls excluded).
    """

    values_ms: list[float]

    def __post_init__(self) -> None:
        if len(self.values_ms) == 0:
            raise ConfigError("`values_ms` must hold at least one value, got none")
        self.values_ms = [float(v) for v in self.values_ms]

    @property
    def count(self) -> int:
        """Number of measured calls."""
        return len(self.values_ms)

    @property
    def p50(self) -> float:
        """Median latency (ms)."""
        return percentile(self.values_ms, 50)

    @property
    def p90(self) -> float:
        """90th-percentile latency (ms)."""
        return percentile(self.values_ms, 90)

    @property
    def mean(self) -> float:
        """Arithmetic mean latency (ms)."""
        return math.fsum(self.values_ms) / self.count

    @property
    def std(self) -> float:
        """Population standard deviation (ddof=0, like ``numpy.std``) in ms; 0.0 for a single value."""
        mu = self.mean
        return math.sqrt(math.fsum((v - mu) ** 2 for v in self.values_ms) / self.count)

    def to_dict(self) -> dict[str, Any]:
        """Returns the raw values plus the derived statistics (which :meth:`from_dict` recomputes)."""
        return {
            "unit": "ms",
            "values_ms": list(self.values_ms),
            "count": self.count,
            "p50": self.p50,
            "p90": self.p90,
            "mean": self.mean,
            "std": self.std,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LatencyRecord:
        """Rebuilds a record from :meth:`to_dict` output; only ``values_ms`` is read."""
        if data.get("unit", "ms") != "ms":
            raise ConfigError(f"`unit` must be 'ms', got {data['unit']!r}")
        if "values_ms" not in data:
            raise ConfigError("a latency record needs `values_ms`")
        return cls(values_ms=list(data["values_ms"]))

    def to_json(self, indent: int | None = None) -> str:
        """Serialises :meth:`to_dict` to JSON."""
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str) -> LatencyRecord:
        """Parses :meth:`to_json` output."""
        return cls.from_dict(json.loads(text))


@dataclass
class PairRecord:
    """Latencies of two callables timed interleaved (A B A B …), in one process.

    ``ratios[i] = b.values_ms[i] / a.values_ms[i]`` for pair ``i``, so a ratio above 1 means A was faster.
    Intended use: ``a`` = the POP configuration, ``b`` = the full model, so :attr:`speedup` is POP's speedup.

    Attributes:
        a: Latencies of the first callable of each pair.
        b: Latencies of the second callable of each pair.
    """

    a: LatencyRecord
    b: LatencyRecord

    def __post_init__(self) -> None:
        if self.a.count != self.b.count:
            raise ConfigError(f"`a` and `b` must hold as many values, got {self.a.count} and {self.b.count}")
        if min(self.a.values_ms) <= 0.0:
            raise ConfigError(f"`a` latencies must be > 0 to form ratios, got {min(self.a.values_ms)}")

    @property
    def ratios(self) -> list[float]:
        """Per-pair ``b / a`` (> 1 means A is faster)."""
        return [b / a for a, b in zip(self.a.values_ms, self.b.values_ms)]

    @property
    def speedup(self) -> float:
        """Median of the per-pair ratios: robust to a slow outlier in either member of one pair."""
        return percentile(self.ratios, 50)

    def to_dict(self) -> dict[str, Any]:
        """Returns both records plus the derived ratios and speedup."""
        return {"a": self.a.to_dict(), "b": self.b.to_dict(), "ratios": self.ratios, "speedup": self.speedup}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PairRecord:
        """Rebuilds a record from :meth:`to_dict` output; only ``a`` and ``b`` are read."""
        if "a" not in data or "b" not in data:
            raise ConfigError("a pair record needs `a` and `b`")
        return cls(a=LatencyRecord.from_dict(data["a"]), b=LatencyRecord.from_dict(data["b"]))

    def to_json(self, indent: int | None = None) -> str:
        """Serialises :meth:`to_dict` to JSON."""
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str) -> PairRecord:
        """Parses :meth:`to_json` output."""
        return cls.from_dict(json.loads(text))


def _check_int(name: str, value: object, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"`{name}` must be an integer, got {value!r}")
    if value < minimum:
        raise ConfigError(f"`{name}` must be >= {minimum}, got {value}")


@dataclass(frozen=True)
class RepeatPolicy:
    """How often to call a function when timing it.

    After ``warmup`` untimed calls, timed calls continue until both ``min_repeats`` calls were made and
    ``min_seconds`` of host wall-clock time passed since the first timed call, but never beyond
    ``max_repeats`` calls. On CUDA the wall clock counts host time, which may run ahead of the GPU by the
    launch queue.

    Attributes:
        warmup: Untimed calls first (compilation, caches, clock ramp-up).
        min_repeats: Fewest timed calls.
        min_seconds: Least wall-clock time of the timed loop, in seconds.
        max_repeats: Most timed calls; wins over ``min_seconds``.
    """

    warmup: int = 2
    min_repeats: int = 5
    min_seconds: float = 1.0
    max_repeats: int = 1000

    def __post_init__(self) -> None:
        _check_int("warmup", self.warmup, 0)
        _check_int("min_repeats", self.min_repeats, 1)
        _check_int("max_repeats", self.max_repeats, self.min_repeats)
        seconds = self.min_seconds
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
            raise ConfigError(f"`min_seconds` must be a finite number, got {seconds!r}")
        if seconds < 0:
            raise ConfigError(f"`min_seconds` must be >= 0, got {seconds}")


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

    def read(self, pending: Sequence[object]) -> list[float]:
        """Turns pending measurements into milliseconds, synchronising the device once on CUDA."""
        if not self.is_cuda:
            return [float(p) for p in pending]  # type: ignore[arg-type]
        self.synchronize()
        return [float(start.elapsed_time(end)) for start, end in pending]  # type: ignore[misc]


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


def _repeat(fns: Sequence[Timed], timer: Timer, policy: RepeatPolicy) -> list[list[float]]:
    """Runs the one repeat loop: warm-up rounds, then timed rounds of ``fns`` in order, back to back."""
    for _ in range(policy.warmup):
        for fn in fns:
            _call(fn, timer)
    timer.synchronize()  # so the timed loop's wall clock does not start with warm-up work still queued
    pending: list[list[object]] = [[] for _ in fns]
    min_ns = policy.min_seconds * 1e9
    start = timer.now_ns()
    rounds = 0
    while rounds < policy.max_repeats:
        for fn, bucket in zip(fns, pending):
            bucket.append(_call(fn, timer))
        rounds += 1
        if rounds >= policy.min_repeats and timer.now_ns() - start >= min_ns:
            break
    return [timer.read(bucket) for bucket in pending]


def measure(fn: Timed, *, timer: Timer, policy: RepeatPolicy | None = None) -> LatencyRecord:
    """Times repeated calls of ``fn()`` (or of a :class:`Staged` call) under ``policy`` (default :class:`RepeatPolicy()`).

    Example:
        >>> rec = measure(lambda: x @ x, timer=Timer("cpu"), policy=RepeatPolicy(min_seconds=0.1))
        >>> rec.p50  # milliseconds
    """
    (values,) = _repeat([fn], timer, policy or RepeatPolicy())
    return LatencyRecord(values_ms=values)


def measure_pair(
    fn_a: Timed,
    fn_b: Timed,
    *,
    timer: Timer,
    policy: RepeatPolicy | None = None,
) -> PairRecord:
    """Times ``fn_a`` and ``fn_b`` interleaved, A B A B …, so drift in clocks or load hits both alike.

    A always goes first in a pair (warm-up runs A B too); a repeat of the policy is one pair. The result's
    ``speedup`` is the median of per-pair ``b / a``: pass the POP configuration as A and the full model as B.
    """
    values_a, values_b = _repeat([fn_a, fn_b], timer, policy or RepeatPolicy())
    return PairRecord(a=LatencyRecord(values_ms=values_a), b=LatencyRecord(values_ms=values_b))
