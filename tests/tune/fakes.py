"""A synthetic evaluator for studies: configurations measured in microseconds, no model, no timing."""

from __future__ import annotations

import contextlib
import random
import types

import pytest
import torch

from poptune import PopConfig
from poptune.env import Measurement, TuningProblem
from poptune.measure import LatencyRecord, PairRecord
from poptune.measure.bench import BenchRow
from poptune.measure.nullcheck import NullCheck, figures

LAYERS = 6


def pair(ratios: list[float]) -> PairRecord:
    return PairRecord(a=LatencyRecord([10.0] * len(ratios)), b=LatencyRecord([10.0 * r for r in ratios]))


def ideal(config: PopConfig) -> float:
    return 1.0 + 0.1 * config.skip


def true(config: PopConfig) -> float:
    return 1.0 + 0.08 * config.skip - 0.005 * config.offset


class FakeEvaluator:
    """Measures a configuration synthetically; calls numbered in ``loaded`` run under an injected load."""

    def __init__(self, problem: TuningProblem, loaded: set[int] = frozenset()) -> None:
        self.problem, self.loaded, self.calls, self.num_layers, self.target_length = problem, loaded, 0, LAYERS, 16
        self.rng = random.Random(0)
        self.model = torch.nn.Linear(1, 1)  # what provenance reads (dtype, attention implementation)

    states = None  # prefix-state reuse: nothing to replay in a synthetic measurement

    def enable_state_reuse(self) -> float:
        self.states = "fake"
        return 0.0

    def restore_full_run(self, stored: dict) -> None:
        pass

    @contextlib.contextmanager
    def sharing(self, configs):
        """Certification shares the full model's trunk with its candidates: nothing to share in a synthetic one."""
        yield None

    def stored_full_run(self) -> None:
        return None

    @property
    def workload(self):
        return types.SimpleNamespace(to_dict=lambda: {"items": {"piqa": 1}})

    def latency_points(self) -> list[tuple[int, float]]:
        return [(16, 1.0)]

    def full_accuracy(self) -> dict[str, float]:
        return {"piqa": 0.75}

    def set_full_accuracy(self, accuracy: dict[str, float]) -> None:
        pass

    def race_accuracy(self, config: PopConfig, *, fresh: int = 0, policy=None, confidence: float = 0.95,
                      futility: bool = False, resize=None):
        """A certification's race on fresh items: the synthetic drop, +-1 point, on the policy's cap (no round
        timed: ``resize`` is not called)."""
        from poptune.evaluate.paired import SEQUENTIAL, PairedDrop
        from poptune.evaluate.racing import RaceResult
        from poptune.interval import Interval

        drop = 100 * (self.full_accuracy()["piqa"] - self.evaluate(config).accuracy["piqa"])
        result = PairedDrop(Interval(drop, drop - 1.0, drop + 1.0, confidence), {"piqa": policy.cap}, {"piqa": 0},
                            SEQUENTIAL)
        budget = self.problem.max_drop
        stopped = "within budget" if result.hi <= budget else "beyond budget" if result.lo > budget else "cap"
        return RaceResult(run=None, drop=result, rounds=1, stopped=stopped)

    def retime(self, measurement: Measurement) -> Measurement:
        return self.evaluate(measurement.config)

    def evaluate(self, config: PopConfig) -> Measurement:
        self.calls += 1
        load = self.calls in self.loaded

        def jitter() -> float:
            return self.rng.uniform(0.995, 1.005)

        ratios = [(6.5 if load else true(config)) * jitter() for _ in range(8)]
        decode = [(2.2 if load else 1.0) * jitter() for _ in range(8)]
        row = BenchRow(length=16, prefill=pair(ratios), ideal=ideal(config), decode=pair(decode))
        check = NullCheck(length=16, aa=None, decode={16: figures(row.decode)},
                          above_ideal=[16] if row.above_ideal else [])
        accuracy = {"piqa": 0.75 - 0.01 * config.skip - 0.001 * config.offset - 0.0001 * len(config.boundary)}
        return Measurement(config=config, latency={16: row.summary()}, target_length=16, accuracy=accuracy,
                           full_accuracy=self.full_accuracy(), null_check=check.to_dict())


@pytest.fixture
def problem():
    return TuningProblem(model="tiny-llama", max_drop=None, tasks=("piqa",), lengths=(16,), decode_tokens=8)


@pytest.fixture(autouse=True)
def quiet_timing(monkeypatch):
    """The A/A pairs and the confirmation pass: quiet synthetic pairs at each configuration's true speedup."""
    calls = []

    def timed(evaluator, config, pairs, warmup, lengths=None):
        calls.append(config)
        return {16: (pair([true(config) * (1 + 0.001 * (i % 3 - 1)) for i in range(pairs)]), ideal(config))}

    monkeypatch.setattr("poptune.tune.trust._time", timed)
    return calls
