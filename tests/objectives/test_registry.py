"""The objective registry: each objective read from a measurement, one Pareto dominance, no positional reads."""

from __future__ import annotations

import ast
import math
import re
import types
from pathlib import Path

import pytest

from poptune.engine import PopConfig
from poptune.errors import ConfigError, MeasurementError
from poptune.objectives import registry
from poptune.objectives.base import DIRECTIONS, References
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
    refs = References({"ttft": 90.0, "tpot": 9.0})
    values = registry.values_of(("ttft", "accuracy", "tpot", "kv_bytes"), m, refs)
    assert values == pytest.approx((90.0 / 1.25, 0.75, 9.0 / 1.2, 3 * 2 ** 20))
    # Without a TPOT reference (a study stored before it), the measurement's own paired full model.
    assert registry.get("tpot").read(m, References({"ttft": 90.0})) == pytest.approx(10.0 / 1.2)
    assert registry.directions(("ttft", "accuracy", "kv_bytes")) == ["minimize", "maximize", "minimize"]
    assert registry.metric_names(("ttft", "tpot", "kv_bytes"), "512") == ["prefill_ms@512", "tpot_ms@512",
                                                                         "kv_bytes@512"]


def test_an_objective_the_measurement_cannot_give_is_an_error_not_a_number():
    with pytest.raises(MeasurementError, match="no decode pairs"):
        registry.get("tpot").read(_measurement(), References({"ttft": 1.0}))
    with pytest.raises(MeasurementError, match="no K/V cache size"):
        registry.get("kv_bytes").read(_measurement(), References({"ttft": 1.0}))


def test_an_objective_says_what_it_asks_of_the_problem():
    problem = types.SimpleNamespace(decode_tokens=0, device="cpu")
    with pytest.raises(ConfigError, match="objective `tpot` times decode steps: `decode_tokens` must be >= 1"):
        registry.check_problem(("ttft", "tpot"), problem)
    registry.check_problem(("ttft", "accuracy", "kv_bytes"), problem)
    registry.check_problem(("ttft", "tpot"), types.SimpleNamespace(decode_tokens=4, device="cpu"))


def test_references_are_keyed_by_objective_and_come_from_a_measurement_once():
    m = _measurement(decode_full_ms_per_token=10.0, decode_pop_ms_per_token=8.0)
    assert registry.new_references(References(), m) == {"ttft": pytest.approx(100.0), "tpot": 10.0}
    assert registry.new_references(References({"ttft": 90.0}), m) == {"tpot": 10.0}  # each written once
    assert registry.new_references(References({"ttft": 90.0}), _measurement()) == {}  # no decode timed: none
    refs = References({"ttft": 90.0})
    assert refs.get("tpot") is None and dict(refs) == {"ttft": 90.0} and len(refs) == 1 and "ttft" in refs
    assert registry.get("kv_bytes").reference is None and registry.get("kv_bytes").reference_attr == \
        "reference_kv_bytes"
    # the names studies stored before references were keyed by objective
    assert (registry.get("ttft").reference_attr, registry.get("tpot").reference_attr) == (
        "reference_prefill_ms", "reference_tpot_ms")


@pytest.mark.parametrize("name", list(registry.OBJECTIVES))
def test_every_objective_keeps_the_contract(name):
    """What every registered objective owes the study, the report and the command line (Optuna runs its sampler
    tests over every sampler the same way): its fields, a requirement said in words, a reference and a reading
    that are figures or nothing -- where a measurement cannot give it, a MeasurementError, never another error."""
    from poptune.problem.problem import TuningProblem

    o = registry.get(name)
    assert o.name == name and o.direction in DIRECTIONS and o.label and o.about and "\n" not in o.about
    assert o.metric.format(target="512") and isinstance(o.cell(1.5), str)
    assert o.reference_attr.startswith("reference_")
    for problem in (TuningProblem(), TuningProblem(decode_tokens=0, device="cuda")):
        reason = o.requires(problem)
        assert reason is None or (isinstance(reason, str) and reason and "\n" not in reason)
    rich = _measurement(decode_full_ms_per_token=10.0, decode_pop_ms_per_token=8.0, decode_speedup=1.2,
                        kv_bytes=3 * 2 ** 20, full_kv_bytes=4 * 2 ** 20)
    for m in (_measurement(), rich):
        if o.reference is not None:
            reference = o.reference(m)
            assert reference is None or math.isfinite(reference)
        for refs in (References(), References({n: 1.0 for n in registry.OBJECTIVES})):
            try:
                value = o.read(m, refs)
            except MeasurementError as e:
                assert name in str(e)
                continue
            assert isinstance(value, float) and math.isfinite(value)


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


def _reads_an_objective(node: ast.Constant, parents: dict[ast.AST, ast.AST]) -> bool:
    """Whether the string ``node`` names an objective where objectives are read: compared (``n == "accuracy"``,
    ``"tpot" in objectives``, ``{"ttft", "accuracy"} <= set(...)``), given as a study's ``objectives=``, or a key
    into values (``values["ttft"]``, ``named(...).get("accuracy")``, ``{"ttft": ...}.get(name)``). A record's
    key (``{"accuracy": ...}``, ``entry["accuracy"]``), a CSV column or another command's figure (the comparison
    board's ``ttft`` ratio) is no objective."""
    parent = parents.get(node)
    if isinstance(parent, ast.Dict) and any(k is node for k in parent.keys):  # a dict literal read at once by name
        outer = parents.get(parent)
        return isinstance(outer, ast.Subscript) or (isinstance(outer, ast.Attribute) and outer.attr == "get")
    literal: ast.AST = node
    if isinstance(parent, (ast.Set, ast.Tuple, ast.List)):
        literal, parent = parent, parents.get(parent)
    if isinstance(parent, ast.Compare):
        return True
    if isinstance(parent, ast.keyword):
        return "objective" in (parent.arg or "")
    if isinstance(parent, ast.Subscript) and parent.slice is literal:
        target = parent.value
    elif (isinstance(parent, ast.Call) and parent.args and parent.args[0] is literal
          and isinstance(parent.func, ast.Attribute) and parent.func.attr in ("get", "pop", "setdefault")):
        target = parent.func.value
    else:
        return False
    return bool(re.search(r"values|objectives|named\(", ast.unparse(target)))


def objective_names_in(source: str) -> list[int]:
    """The lines of ``source`` that name a registered objective where objectives are read."""
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    return sorted({node.lineno for node in ast.walk(tree) if isinstance(node, ast.Constant)
                   and node.value in registry.OBJECTIVES and _reads_an_objective(node, parents)})


def test_no_objective_is_named_outside_the_registry_floor():
    found = []
    for path in sorted((ROOT / "poptune").rglob("*.py")):
        if path.is_relative_to(ROOT / "poptune" / "objectives"):
            continue
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        found += [f"{path.relative_to(ROOT)}:{n}: {lines[n - 1].strip()}" for n in objective_names_in(text)]
    assert not found, ("objectives named by string outside poptune/objectives (give the objective the hook it "
                       "needs, or use its module's constant):\n" + "\n".join(found))


def test_the_name_scan_finds_what_it_looks_for():
    for line in ('if "tpot" in self.objectives and self.decode_tokens < 1: pass',
                 'if not {"ttft", "accuracy"} <= set(objectives): pass',
                 'x = values["ttft"]', 'x = values.get("ttft", 1.0)', 'values["accuracy"] = accuracy',
                 'x = named(objectives, t.values).get("accuracy", t.objective_accuracy)',
                 'x = [a if n == "accuracy" else b for n in objectives]',
                 'x = {"ttft": row.prefill_ms, "accuracy": row.accuracy}.get(name, row.values.get(name))',
                 'p = TuningProblem(objectives=("ttft", "kv_bytes"))'):
        assert objective_names_in(line) == [1], line
    for line in ('x = {"accuracy": self.accuracy, "items": 3}', 'x = _float(row, "accuracy", where)',
                 'x = row.speed[profile]["ttft"].median', 'x = [k for k in ("ttft", "tpot", "e2e")]',
                 'x = entry["accuracy"] if entry.get("accuracy") is not None else 0',
                 'x = progress.phase("accuracy", unit="round")', 'x = values[TTFT.name]'):
        assert objective_names_in(line) == [], line
