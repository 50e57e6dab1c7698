"""Clocks for the one timer (:mod:`poptune.measure.timer`) that make a test's verdict independent of the machine.

- :func:`counting_work`: a clock that counts work, not time, for tests of what a study, a front or a table does
  with its latencies: the same calls always take the same time, on an idle and on a loaded machine.
- :class:`ScrambledTime`: the clock of ``pytest --scramble-clock SEED``, which stretches every interval it reads
  by a random factor in [1/4, 4]: a test that fails only under it depends on the machine's speed or load.

The real timer's own contract (what it records, how its loop stops) is tested on injected clocks in
``tests/measure/test_timer.py``.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Iterator
from typing import Any

import pytest

__all__ = ["ScrambledTime", "WorkClock", "counting_work"]


class WorkClock:
    """The ``time`` module as the timer sees it under :func:`counting_work`.

    ``perf_counter_ns`` moves only with work: every linear product (``torch.nn.functional.linear``: an
    ``nn.Linear`` call, and the skipped block's one K/V product, :mod:`poptune.kv.block_kv`) advances it by its
    multiply-adds (1 ns each) and every reading by 1 us (so a call without such work still takes time). A/A
    pairs are exactly equal, decode pairs too, and a POP configuration's speedup is the share of the projections it
    skips.
    """

    def __init__(self) -> None:
        import torch  # lazily: conftest imports this module, and ``pytest --help`` needs no torch

        self.ns, self._linear = 0, torch.nn.functional.linear

    def perf_counter_ns(self) -> int:
        self.ns += 1_000
        return self.ns

    def linear(self, x: Any, weight: Any, bias: Any = None) -> Any:
        """``torch.nn.functional.linear``, charged its multiply-adds."""
        self.ns += x.numel() // weight.shape[-1] * weight.numel()
        return self._linear(x, weight, bias)

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


@contextlib.contextmanager
def counting_work() -> Iterator[WorkClock]:
    """Within it, the timer reads a fresh :class:`WorkClock` (``with counting_work(): run_study(spec)``, in a
    fixture of any scope)."""
    clock = WorkClock()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("poptune.measure.timer.time", clock)
        mp.setattr("torch.nn.functional.linear", clock.linear)
        yield clock


class ScrambledTime:
    """The ``time`` module as the timer sees it under ``--scramble-clock``: ``perf_counter_ns`` stays monotonic
    and moves at least 1 ns a reading, but each interval since the last reading is stretched by a random factor
    in [1/4, 4] (a machine whose load comes and goes, to the extreme), seeded by ``seed``."""

    def __init__(self, seed: str) -> None:
        self._rng = random.Random(seed)
        self._real = self._seen = time.perf_counter_ns()

    def perf_counter_ns(self) -> int:
        real = time.perf_counter_ns()
        self._seen += max(1, round((real - self._real) * 4 ** self._rng.uniform(-1, 1)))
        self._real = real
        return self._seen

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)
