"""The test clocks of ``tests/clocks.py``: the work clock times a real bench the same way every time, whatever the
load; the scrambled clock (``pytest --scramble-clock``) stays a clock."""

from __future__ import annotations

import time

import pytest

from poptune import PopConfig
from poptune.measure import RepeatPolicy, Timer, measure
from poptune.measure.bench import BenchSpec, run_bench

from ..clocks import ScrambledTime, counting_work


@pytest.fixture
def tiny(shared):
    return shared("tiny-llama")


def _bench(tiny, config: PopConfig, null_check: bool = False):
    spec = BenchSpec(lengths=(16,), decode_tokens=2, null_check=null_check,
                     policy=RepeatPolicy(warmup=1, min_repeats=4, max_repeats=4, min_seconds=0.0))
    return run_bench(*tiny, config, spec, model_name="tiny-llama")


def test_a_bench_on_the_work_clock_is_the_same_every_time_and_just_under_its_flops_ideal(tiny):
    with counting_work():
        first, again = _bench(tiny, PopConfig(skip=2), null_check=True), _bench(tiny, PopConfig(skip=2))
        deeper = _bench(tiny, PopConfig(skip=4))
    row = first.rows[0]
    same = again.rows[0].prefill  # every value, not just the median (the wall-clock date of the run aside)
    assert (row.prefill.a.values_ms, row.prefill.b.values_ms) == (same.a.values_ms, same.b.values_ms)
    # The projections' share of the work: above 1, within 3% under the FLOPs ideal (which counts attention too);
    # the block's one K/V product projects the pruned tokens only (the boundary token's K/V come from its own pass
    # through the layer), one token's K/V per skipped layer fewer than the ideal counts: at most 0.5% above it.
    assert 1.0 < row.speedup <= row.ideal * 1.005 and row.ideal < row.speedup * 1.03 and not row.above_ideal
    assert 1.0 < row.speedup < deeper.rows[0].speedup
    # Identical work takes identical time: the A/A pairs are equal, so the null check passes on any machine.
    check = first.null_check
    assert check.aa["speedup"] == check.aa["lo"] == check.aa["hi"] == 1.0 and check.aa["equivalent"]
    assert row.decode.speedup == 1.0 and not check.noisy


def test_the_work_clock_is_only_in_place_while_counting(tiny):
    model, tok = tiny
    inputs = tok("a few words", return_tensors="pt")
    outside = Timer("cpu").clock
    with counting_work() as clock:
        assert Timer("cpu").clock == clock.perf_counter_ns
        model(**inputs)
        counted = clock.ns
    assert counted > 0 and Timer("cpu").clock == outside
    model(**inputs)  # no hook left behind: nothing counts after the block
    assert clock.ns == counted


def test_the_scrambled_clock_is_monotonic_seeded_and_stretches_intervals_within_a_factor_of_four(monkeypatch):
    def readings(seed: str) -> list[int]:
        monkeypatch.setattr(time, "perf_counter_ns", iter(range(0, 10**9, 10**6)).__next__)  # 1 ms a reading
        clock = ScrambledTime(seed)
        return [clock.perf_counter_ns() for _ in range(200)]

    seven = readings("7")
    steps = [b - a for a, b in zip(seven, seven[1:])]
    assert all(10**6 / 4 <= s <= 4 * 10**6 for s in steps) and max(steps) / min(steps) > 4
    assert readings("7") == seven != readings("8")


def test_a_scrambled_timer_still_keeps_the_timers_contract():
    clock = ScrambledTime("1")
    rec = measure(lambda: sum(range(1000)), timer=Timer("cpu", clock=clock.perf_counter_ns),
                  policy=RepeatPolicy(warmup=1, min_repeats=5, max_repeats=5, min_seconds=0.0))
    assert rec.count == 5 and all(v > 0 for v in rec.values_ms)
