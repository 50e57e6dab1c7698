"""The methods board passes each task's metric direction, and its planned sizes use its own test (issue 58)."""

from poptune.comparison.board import lead_of, lower_tasks, row_confidence, verdict_of


def test_a_bits_per_byte_task_gets_its_lead_in_the_metrics_direction():
    # POP's bits per byte are lower (better) than the baseline's on every item: POP leads
    pop = {"longctx_squad_bpb": [0.80, 0.90, 0.85, 0.70] * 8}
    baseline = {"longctx_squad_bpb": [1.00, 1.10, 1.05, 0.95] * 8}
    assert lower_tasks(["piqa", "longctx_squad_bpb"]) == ["longctx_squad_bpb"]
    lead = lead_of(pop, baseline, 1, lower_tasks(list(pop)))
    assert lead.mean > 0 and verdict_of(lead) == "POP more accurate", lead
    # without the direction the same items read the other way round: the bug this fixes
    assert lead_of(pop, baseline, 1).mean < 0


def test_the_planned_size_is_the_tests_own_and_reaches_its_power():
    import numpy as np

    from poptune.comparison.board_decisions import row_power
    from poptune.comparison.cost import items_to_decide
    from poptune.evaluate.decisions import Scenario

    scenario, rows = Scenario(0.04, 0.12), 4
    rng = np.random.default_rng(58)
    drawn = [scenario.draw(rng, 20_000) for _ in range(2)]  # a large pilot: the flip rates are what they are
    per_task = items_to_decide({"a": drawn[0][0], "b": drawn[1][0]}, {"a": drawn[0][1], "b": drawn[1][1]}, 4.0,
                               row_confidence(rows))
    # the restricted variance (the flip rate) and the continuity correction make it larger than the former size
    z = 2.4977 + 0.8416  # z_(1 - 0.0125 / 2) + z_0.8
    assert per_task > z * z * (0.12 - 0.04 ** 2) / 2 / 0.04 ** 2
    rates = row_power(scenario, rows=rows, tasks=2, per_task=per_task, replicates=300, seed=6)
    assert rates.right >= 0.8 - 3 * rates.standard_error(0.8), (per_task, rates)
    # a bits-per-byte task keeps the sample variance and no correction (its interval is a bootstrap)
    assert items_to_decide({"t": [1.0, 2.0] * 50}, {"t": [1.5, 2.5] * 50}, 10.0, 0.95, lower_is_better=["t"]) >= 1
