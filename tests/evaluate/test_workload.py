"""Workloads: a fixed item order, prompt lengths, latency points, and items too long for the context."""

import pytest

from poptune import ConfigError, load_model
from poptune.evaluate.workload import Workload, build_workload, synthetic_pool


@pytest.fixture(scope="module")
def tok():
    return load_model("tiny-llama")[1]


def test_latency_points_are_quantile_groups_weighted_by_their_share():
    w = Workload(order={"a": list(range(6)), "b": list(range(3))},
                 tokens={"a": [100, 110, 120, 1000, 1010, 1020], "b": [2000, 2010, 2020]})
    points = w.latency_points(None, 3)
    assert [n for n, _ in points] == [110, 1010, 2010]
    assert sum(weight for _, weight in points) == pytest.approx(1.0)
    assert w.latency_points(2, 1) == [(2000, 1.0)]  # the first 2 of each: 100, 110, 2000, 2010 (upper median)
    with pytest.raises(ConfigError):
        Workload(order={"a": []}, tokens={"a": []}).latency_points(None)


def test_the_synthetic_pool_is_stable_as_it_grows(tok):
    small = synthetic_pool(tok, "kv_recall", 3, lengths=(300,), seed=0)
    large = synthetic_pool(tok, "kv_recall", 7, lengths=(300,), seed=0)
    assert small == large[:3]
    passkey = synthetic_pool(tok, "passkey", 5, lengths=(300,), seed=0)
    assert sorted(item.meta["depth"] for item in passkey) == [0.0, 0.25, 0.5, 0.75, 1.0]  # one block: every cell


def test_items_too_long_for_the_context_are_skipped_and_counted(tok):
    w = build_workload(tok, ("kv_recall",), data_dir=None, cap=4, synthetic_lengths=(300,))
    assert w.size("kv_recall") == 4 and w.skipped == {"kv_recall": 0}
    longest = max(w.tokens["kv_recall"])
    with pytest.raises(ConfigError, match="no item whose prompt fits"):
        build_workload(tok, ("kv_recall",), data_dir=None, cap=4, synthetic_lengths=(300,), max_positions=100)
    # a context between the two prompt sizes (8 and 32 pairs) keeps the short ones only
    shortest = min(w.tokens["kv_recall"])
    w = build_workload(tok, ("kv_recall",), data_dir=None, cap=4, synthetic_lengths=(300,),
                       max_positions=shortest + 256 + 50)
    assert all(n <= shortest + 50 < longest for n in w.tokens["kv_recall"]) and w.size("kv_recall") == 4
    assert w.skipped["kv_recall"] >= 4  # the 32-pair items: skipped and counted, never truncated
