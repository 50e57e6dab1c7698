"""The objective registry: each objective read from a measurement, one Pareto dominance, no positional reads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from poptune.engine import PopConfig
from poptune.errors import ConfigError, MeasurementError
from poptune.objectives import registry
from poptune.objectives.base import References
from poptune.store.measurement import Measurement

ROOT = Path(__file__).resolve().parents[2]


def _measurement(**row) -> Measurement:
    latency = {512: {"pop_ms": 80.0, "full_ms": 100.0, "speedup": 1.25, "ideal": 1.3, **row},
               128: {"pop_ms": 20.0, "full_ms": 22.0, "speedup": 1.1, "ideal": 1.2}}
    return Measurement(config=PopConfig(6, "last"), latency=latency, target_length=512,
                       accuracy={"passkey": 0.75}, full_accuracy={"passkey": 0.8})


def test_each_objective_is_read_from_the_measurement_against_the_references():
    m = _measurement(decode_full_ms_per_token=10.0, decode_pop_ms_per_token=8.0, decode_speedup=1.2,
                     kv_bytes=3 * 2 ** 20, full_kv_bytes=4 * 2 ** 20)
    refs = References(ttft_ms=90.0, tpot_ms=9.0)
    values = registry.values_of(("ttft", "accuracy", "tpot", "kv_bytes"), m, refs)
    assert values == pytest.approx((90.0 / 1.25, 0.75, 9.0 / 1.2, 3 * 2 ** 20))
    # Without a TPOT reference (a study stored before it), the measurement's own paired full model.
    assert registry.get("tpot").read(m, References(ttft_ms=90.0)) == pytest.approx(10.0 / 1.2)
    assert registry.directions(("ttft", "accuracy", "kv_bytes")) == ["minimize", "maximize", "minimize"]
    assert registry.metric_names(("ttft", "tpot", "kv_bytes"), "512") == ["prefill_ms@512", "tpot_ms@512",
                                                                         "kv_bytes@512"]


def test_an_objective_the_measurement_cannot_give_is_an_error_not_a_number():
    with pytest.raises(MeasurementError, match="no decode pairs"):
        registry.get("tpot").read(_measurement(), References(ttft_ms=1.0))
    with pytest.raises(MeasurementError, match="no K/V cache size"):
        registry.get("kv_bytes").read(_measurement(), References(ttft_ms=1.0))


def test_names_are_checked_in_one_line():
    assert registry.parse("ttft, accuracy,kv_bytes") == ("ttft", "accuracy", "kv_bytes")
    for text, message in (("ttft,speed", "unknown objective.*'speed'.*use ttft, accuracy, tpot, kv_bytes"),
                          ("ttft", "two or more distinct"), ("ttft,ttft", "two or more distinct"), ("", "none")):
        with pytest.raises(ConfigError, match=message) as e:
            registry.parse(text)
        assert "\n" not in str(e.value)


def test_one_dominance_for_every_direction():
    names = ("ttft", "accuracy", "kv_bytes")
    a = {"ttft": 10.0, "accuracy": 0.8, "kv_bytes": 100.0}
    assert registry.dominates({**a, "ttft": 9.0}, a, names)
    assert not registry.dominates(a, a, names) and registry.weakly_dominates(a, a, names)
    assert not registry.dominates({**a, "ttft": 9.0, "accuracy": 0.7}, a, names)  # faster, less accurate: a trade
    assert registry.dominates({**a, "kv_bytes": 50.0}, a, names)
    assert not registry.dominates({**a, "kv_bytes": 50.0}, a, ("ttft", "accuracy"))  # not an objective there
    assert registry.named(names, [1, 2, 3]) == {"ttft": 1.0, "accuracy": 2.0, "kv_bytes": 3.0}
    assert registry.named(names, [1, 2]) == {} and registry.named(names, None) == {}


#: What reads an objective by its position, or spells a study's directions out: ``values[0]``, ``t.values[1]``,
#: ``directions=["minimize", ...]`` and ``set_metric_names([...])``.
POSITIONAL = re.compile(r"\bvalues\s*\[\s*-?\d+\s*\]|directions\s*=\s*\[|set_metric_names\(\s*\[")


def test_no_objective_is_read_by_position_outside_the_registry():
    found = []
    for path in sorted((ROOT / "poptune").rglob("*.py")):
        if path.is_relative_to(ROOT / "poptune" / "objectives"):
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if POSITIONAL.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, ("objectives read by position (read them by name: poptune.objectives.registry.named, "
                       "directions, values_of):\n" + "\n".join(found))


def test_the_scan_finds_what_it_looks_for():
    for line in ("prefill_ms = t.values[0]", "(t.speedup, 100 * t.values[1], '')", "values[ 1 ]",
                 'optuna.create_study(directions=["minimize", "maximize"])',
                 'study.set_metric_names(["prefill_ms@512", "accuracy"])'):
        assert POSITIONAL.search(line), line
    for line in ("e.values[o.name]", "named(objectives, t.values)", "directions=objectives.directions(names)"):
        assert not POSITIONAL.search(line), line
