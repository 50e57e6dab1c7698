"""Tests of the timer, the repeat loop and latency records, on synthetic clocks (no real wall-clock speed)."""

from __future__ import annotations

import math

import pytest
import torch

from poptune.errors import ConfigError, DeviceError
from poptune.measure import LatencyRecord, PairRecord, RepeatPolicy, Staged, Timer, measure, measure_pair, percentile


class FakeClock:
    """A host clock in ns that only moves when a timed function says so."""

    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns

    def advance_ms(self, ms: float) -> None:
        self.ns += round(ms * 1e6)


def test_percentile_interpolates_linearly() -> None:
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == pytest.approx(2.5)
    assert percentile([1.0, 2.0, 3.0, 4.0], 90) == pytest.approx(3.7)  # rank 2.7 → 3 + 0.7
    assert percentile([1.0, 2.0, 3.0, 4.0], 0) == 1.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 100) == 4.0
    assert percentile([7.0], 90) == 7.0


def test_latency_record_statistics() -> None:
    rec = LatencyRecord(values_ms=[4.0, 1.0, 3.0, 2.0, 10.0])
    assert rec.count == 5
    assert rec.p50 == pytest.approx(3.0)
    assert rec.p90 == pytest.approx(7.6)  # rank 3.6 between 4 and 10
    assert rec.mean == pytest.approx(4.0)
    assert rec.std == pytest.approx(math.sqrt((0 + 9 + 1 + 4 + 36) / 5))  # population std
    assert LatencyRecord(values_ms=[2.0]).std == 0.0


def test_empty_records_are_refused() -> None:
    with pytest.raises(ConfigError, match="at least one value"):
        LatencyRecord(values_ms=[])
    with pytest.raises(ConfigError, match="as many values"):
        PairRecord(a=LatencyRecord([1.0]), b=LatencyRecord([1.0, 2.0]))


@pytest.mark.parametrize(
    ("call_ms", "min_repeats", "min_seconds", "max_repeats", "expected"),
    [
        (300.0, 3, 1.0, 1000, 4),  # 3 calls = 0.9 s: one more for the time
        (250.0, 3, 1.0, 1000, 4),  # exactly 1.0 s after 4 calls
        (300.0, 5, 0.5, 1000, 5),  # time met after 2, count after 5
        (300.0, 1, 0.0, 1000, 1),
        (300.0, 2, 100.0, 7, 7),  # capped
    ],
)
def test_repeat_policy_stops_when_both_conditions_are_met(
    call_ms: float, min_repeats: int, min_seconds: float, max_repeats: int, expected: int
) -> None:
    clock = FakeClock()
    calls = []

    def fn() -> None:
        calls.append(clock.ns)
        clock.advance_ms(call_ms)

    policy = RepeatPolicy(warmup=2, min_repeats=min_repeats, min_seconds=min_seconds, max_repeats=max_repeats)
    rec = measure(fn, timer=Timer("cpu", clock=clock), policy=policy)
    assert rec.count == expected
    assert len(calls) == expected + 2  # warm-up calls run but are not counted
    assert rec.values_ms == pytest.approx([call_ms] * expected)


def test_measure_records_each_call() -> None:
    clock = FakeClock()
    durations = iter([50.0, 50.0, 5.0, 1.0, 3.0, 2.0])  # two warm-up calls first

    rec = measure(lambda: clock.advance_ms(next(durations)), timer=Timer("cpu", clock=clock),
                  policy=RepeatPolicy(warmup=2, min_repeats=4, min_seconds=0.0))
    assert rec.values_ms == pytest.approx([5.0, 1.0, 3.0, 2.0])


@pytest.mark.parametrize("enabled", [True, False])
def test_the_garbage_collector_is_off_in_the_timed_rounds_and_restored_after(enabled: bool) -> None:
    import gc

    clock, seen = FakeClock(), []

    def call() -> None:
        seen.append(gc.isenabled())
        clock.advance_ms(1.0)

    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        measure_pair(call, call, timer=Timer("cpu", clock=clock),
                     policy=RepeatPolicy(warmup=1, min_repeats=12, min_seconds=0.0))
        assert gc.isenabled() is enabled  # as it was before
    finally:
        gc.enable() if was else gc.disable()
    assert seen[:2] == [enabled] * 2  # the warm-up pair: as the caller has it
    assert len(seen) == 2 + 24 and not any(seen[2:])  # every timed call: off


def test_warm_up_lasts_its_least_time_as_well_as_its_rounds() -> None:
    clock = FakeClock()
    durations = iter([300.0, 300.0, 300.0, 300.0, 5.0, 1.0])  # 4 warm-up calls reach 1 s; 2 were asked for

    rec = measure(lambda: clock.advance_ms(next(durations)), timer=Timer("cpu", clock=clock),
                  policy=RepeatPolicy(warmup=2, warmup_seconds=1.0, min_repeats=2, min_seconds=0.0))
    assert rec.values_ms == pytest.approx([5.0, 1.0])


def test_measure_pair_interleaves_and_takes_median_of_ratios() -> None:
    clock = FakeClock()
    log: list[str] = []
    b_ms = iter([99.0, 20.0, 30.0, 15.0, 40.0])  # first is warm-up

    def fn_a() -> None:
        log.append("A")
        clock.advance_ms(10.0)

    def fn_b() -> None:
        log.append("B")
        clock.advance_ms(next(b_ms))

    pair = measure_pair(fn_a, fn_b, timer=Timer("cpu", clock=clock),
                        policy=RepeatPolicy(warmup=1, min_repeats=4, min_seconds=0.0))
    assert log == ["A", "B", "A", "B", "B", "A", "A", "B", "B", "A"]
    assert pair.a.values_ms == pytest.approx([10.0] * 4)
    assert pair.ratios == pytest.approx([2.0, 3.0, 1.5, 4.0])
    assert pair.speedup == pytest.approx(2.5)  # b/a > 1: A is faster


def test_staged_calls_time_only_the_run() -> None:
    clock = FakeClock()
    order: list[str] = []

    def setup() -> int:
        order.append("setup")
        clock.advance_ms(100.0)  # untimed preparation
        return 7

    def run(state: int) -> None:
        order.append(f"run {state}")
        clock.advance_ms(2.0)

    rec = measure(Staged(setup, run), timer=Timer("cpu", clock=clock),
                  policy=RepeatPolicy(warmup=1, min_repeats=3, min_seconds=0.0))
    assert rec.values_ms == [2.0, 2.0, 2.0]
    assert order == ["setup", "run 7"] * 4


def test_records_round_trip_through_json() -> None:
    rec = LatencyRecord(values_ms=[1.5, 2.25, 3.0])
    assert LatencyRecord.from_json(rec.to_json()) == rec
    assert rec.to_dict()["p50"] == pytest.approx(2.25)
    pair = PairRecord(a=LatencyRecord([1.0, 2.0]), b=LatencyRecord([2.0, 5.0]))
    again = PairRecord.from_json(pair.to_json(indent=2))
    assert again == pair
    assert again.speedup == pytest.approx(2.25)
    assert pair.to_dict()["ratios"] == pytest.approx([2.0, 2.5])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_repeats": 0}, "`min_repeats` must be >= 1, got 0"),
        ({"warmup": -1}, "`warmup` must be >= 0, got -1"),
        ({"min_seconds": -0.5}, "`min_seconds` must be >= 0, got -0.5"),
        ({"min_seconds": float("nan")}, "`min_seconds` must be a finite number"),
        ({"min_repeats": 10, "max_repeats": 5}, "`max_repeats` must be >= 10, got 5"),
        ({"min_repeats": 2.5}, "`min_repeats` must be an integer"),
        ({"warmup": True}, "`warmup` must be an integer"),
        ({"precision": 0}, "`precision` must be > 0, got 0"),
        ({"order": "ba"}, "`order` must be one of alternate, random, fixed, got 'ba'"),
        ({"confidence": 1.0}, "`confidence` must be in (0, 1)"),
    ],
)
def test_bad_policy_values_raise(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        RepeatPolicy(**kwargs)
    assert message in str(info.value)


def test_cuda_without_cuda_raises_device_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(DeviceError, match="CUDA was requested but is not available"):
        Timer("cuda")


@pytest.mark.parametrize("device", ["gpu", "mps", "cuda:x"])
def test_bad_device_raises_config_error(device: str) -> None:
    with pytest.raises(ConfigError, match="`device` must be"):
        Timer(device)


def test_cuda_path_uses_events_and_synchronises_outside_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = {"ms": 0.0}
    log: list[str] = []
    stream = object()

    class FakeEvent:
        def __init__(self, enable_timing: bool = False) -> None:
            assert enable_timing
            self.at: float | None = None

        def record(self, s: object = None) -> None:
            assert s is stream
            self.at = gpu["ms"]

        def elapsed_time(self, end: FakeEvent) -> float:
            assert log[-1] == "sync", "events are read only after a synchronisation"
            return end.at - self.at

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: stream)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: log.append("sync"))

    def fn() -> None:
        log.append("call")
        gpu["ms"] += 2.0

    timer = Timer("cuda", clock=FakeClock())
    assert timer.device == torch.device("cuda", 0)
    rec = measure(fn, timer=timer, policy=RepeatPolicy(warmup=2, min_repeats=10, min_seconds=0.0))
    assert rec.values_ms == pytest.approx([2.0] * 10)
    assert log == ["call"] * 2 + ["sync"] + ["call"] * 10 + ["sync"]  # no per-run synchronisation


def test_real_cpu_matmul_smoke() -> None:
    x = torch.randn(64, 64)
    rec = measure(lambda: x @ x, timer=Timer("cpu"),
                  policy=RepeatPolicy(warmup=1, min_repeats=3, min_seconds=0.0, max_repeats=3))
    assert rec.count == 3
    assert all(v > 0 for v in rec.values_ms)


def test_measure_pair_alternates_order_and_keeps_it_with_times() -> None:
    clock = FakeClock()
    log: list[str] = []

    def fn_a() -> None:
        log.append("A")
        clock.advance_ms(10.0)

    def fn_b() -> None:
        log.append("B")
        clock.advance_ms(20.0)

    pair = measure_pair(fn_a, fn_b, timer=Timer("cpu", clock=clock),
                        policy=RepeatPolicy(warmup=1, min_repeats=4, min_seconds=0.0))
    assert log == ["A", "B", "A", "B", "B", "A", "A", "B", "B", "A"]  # warm-up, then A-B, B-A, ...
    assert pair.order == ["ab", "ba", "ab", "ba"]
    assert pair.offsets_s == pytest.approx([0.0, 0.03, 0.06, 0.09])
    assert pair.ratios == pytest.approx([2.0] * 4)
    back = PairRecord.from_json(pair.to_json())
    assert back.order == pair.order and back.offsets_s == pair.offsets_s


def test_random_order_is_seeded() -> None:
    def orders(seed: int) -> list[str]:
        clock = FakeClock()
        pair = measure_pair(lambda: clock.advance_ms(1.0), lambda: clock.advance_ms(1.0),
                            timer=Timer("cpu", clock=clock),
                            policy=RepeatPolicy(warmup=0, min_repeats=20, min_seconds=0.0, order="random", seed=seed))
        return pair.order

    assert orders(3) == orders(3)
    assert orders(3) != orders(4)
    assert {"ab", "ba"} == set(orders(3))


def test_fixed_order_puts_a_first_always() -> None:
    clock = FakeClock()
    pair = measure_pair(lambda: clock.advance_ms(1.0), lambda: clock.advance_ms(1.0), timer=Timer("cpu", clock=clock),
                        policy=RepeatPolicy(warmup=0, min_repeats=3, min_seconds=0.0, order="fixed"))
    assert pair.order == ["ab"] * 3


def test_interval_of_a_pair_brackets_its_speedup_and_narrows_with_pairs() -> None:
    import random

    rng = random.Random(0)
    few = [rng.gauss(1.5, 0.1) for _ in range(8)]
    many = few + [rng.gauss(1.5, 0.1) for _ in range(200)]

    def pair_of(ratios: list[float]) -> PairRecord:
        return PairRecord(a=LatencyRecord([10.0] * len(ratios)), b=LatencyRecord([10.0 * r for r in ratios]))

    ci = pair_of(few).speedup_ci
    assert ci.contains(pair_of(few).speedup) and ci.point == pair_of(few).speedup
    narrow = pair_of(many).speedup_ci
    assert narrow.width < ci.width
    assert narrow.contains(1.5)
    assert pair_of(many).speedup_ci == narrow  # exact: the same samples give the same interval
    assert pair_of([2.0, 3.0]).speedup_ci.ends() == (2.0, 3.0)  # under 6 pairs: the range, with less coverage
    assert pair_of([2.0, 3.0]).speedup_coverage == 0.5 and not pair_of([2.0, 3.0]).speedup_ci.meets
    assert pair_of(few).speedup_coverage >= 0.95
    data = pair_of(few).to_dict()
    assert (data["speedup_lo"], data["speedup_hi"], data["pairs"]) == (ci.lo, ci.hi, 8)


def _noisy_pair(policy: RepeatPolicy, spread: float) -> PairRecord:
    import random

    clock = FakeClock()
    rng = random.Random(1)
    return measure_pair(lambda: clock.advance_ms(10.0),
                        lambda: clock.advance_ms(10.0 * rng.uniform(2 - spread, 2 + spread)),
                        timer=Timer("cpu", clock=clock), policy=policy)


def test_precision_rule_stops_once_the_interval_is_narrow_enough() -> None:
    loose = _noisy_pair(RepeatPolicy(warmup=0, min_repeats=3, min_seconds=0.0, max_repeats=500, precision=0.05), 0.4)
    tight = _noisy_pair(RepeatPolicy(warmup=0, min_repeats=3, min_seconds=0.0, max_repeats=500, precision=0.02), 0.4)
    assert loose.half_width <= 0.05 and tight.half_width <= 0.02
    assert 6 <= loose.count < tight.count < 500
    # Judged on whole A-B/B-A blocks: an even count, and one block less the interval was still too wide.
    assert loose.count % 2 == tight.count % 2 == 0
    shorter = PairRecord(a=LatencyRecord(tight.a.values_ms[:-2]), b=LatencyRecord(tight.b.values_ms[:-2]))
    assert shorter.half_width > 0.02


def test_precision_rule_respects_the_caps() -> None:
    capped = _noisy_pair(RepeatPolicy(warmup=0, min_repeats=3, min_seconds=0.0, max_repeats=7, precision=0.001), 0.4)
    assert capped.count == 7
    timed = _noisy_pair(RepeatPolicy(warmup=0, min_repeats=3, min_seconds=0.0, max_seconds=0.5, precision=0.001), 0.4)
    assert timed.count == 17  # pairs of ~30 ms: the 0.5 s cap is passed after the 17th
    exact = _noisy_pair(RepeatPolicy(warmup=0, min_repeats=3, min_seconds=0.0, precision=0.02), 0.0)
    assert exact.count == 6  # identical ratios: no width, but judged only from the 6 pairs a 95% interval needs


def test_precision_rule_never_stops_on_too_few_pairs_to_judge() -> None:
    one = _noisy_pair(RepeatPolicy(warmup=0, min_repeats=1, min_seconds=0.0, precision=0.02), 0.0)
    assert one.count == 6  # fewer pairs' "interval" is their range, short of 95%: six are the least judged
    clock = FakeClock()
    single = measure(lambda: clock.advance_ms(10.0), timer=Timer("cpu", clock=clock),
                     policy=RepeatPolicy(warmup=0, min_repeats=1, min_seconds=0.0, precision=0.02, confidence=0.9))
    assert single.count == 5  # 90% is reached from five values (1 - 2 * 0.5**5 = 0.94), and one function has no blocks
    odd = _noisy_pair(RepeatPolicy(warmup=0, min_repeats=7, min_seconds=0.0, precision=0.02), 0.0)
    assert odd.count == 8  # a pair's interval is judged on whole blocks: the seventh pair's block is completed


@pytest.mark.parametrize("order", ["alternate", "random"])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_pairs_run_in_balanced_ab_ba_blocks_and_record_the_order_they_ran(order: str, seed: int) -> None:
    clock = FakeClock()
    log: list[str] = []

    def side(name: str):
        def call() -> None:
            log.append(name)
            clock.advance_ms(1.0)
        return call

    pair = measure_pair(side("A"), side("B"), timer=Timer("cpu", clock=clock),
                        policy=RepeatPolicy(warmup=0, min_repeats=12, min_seconds=0.0, order=order, seed=seed))
    assert all(sorted(pair.order[i:i + 2]) == ["ab", "ba"] for i in range(0, 12, 2))  # each block: one of each
    assert "".join(log) == "".join("AB" if o == "ab" else "BA" for o in pair.order)  # the order kept is the order run
    if order == "alternate":
        assert pair.order == ["ab", "ba"] * 6


def test_random_blocks_differ_by_seed_in_which_comes_first() -> None:
    def orders(seed: int) -> list[str]:
        clock = FakeClock()
        return measure_pair(lambda: clock.advance_ms(1.0), lambda: clock.advance_ms(1.0),
                            timer=Timer("cpu", clock=clock),
                            policy=RepeatPolicy(warmup=0, min_repeats=40, min_seconds=0.0, order="random",
                                                seed=seed)).order

    firsts = [orders(3)[i] for i in range(0, 40, 2)]
    assert set(firsts) == {"ab", "ba"} and orders(3) == orders(3) != orders(5)


def test_balanced_blocks_cancel_a_drifting_load_that_a_fixed_order_does_not() -> None:
    def drifting(order: str) -> PairRecord:
        clock = FakeClock()
        calls = [0]

        def identical() -> None:  # identical work whose every call is 1% slower than the one before
            clock.advance_ms(10.0 * 1.01 ** calls[0])
            calls[0] += 1

        return measure_pair(identical, identical, timer=Timer("cpu", clock=clock),
                            policy=RepeatPolicy(warmup=0, min_repeats=12, min_seconds=0.0, order=order))

    assert drifting("fixed").speedup == pytest.approx(1.01, abs=1e-4)  # B always second, always 1% slower: a false 1%
    assert drifting("alternate").speedup == pytest.approx(1.0, abs=1e-4)  # 1.01 and 1/1.01 in turn: median ~1
