"""How often the methods board's verdicts are wrong, and how often they decide: a seeded simulation of a table.

The board (:mod:`poptune.comparison.board`) gives each of a table's R baseline rows the interval of POP - baseline
at ``1 - 0.05 / R`` (:func:`~poptune.comparison.board.lead_of`) and a verdict
(:func:`~poptune.comparison.board.verdict_of`). Here those two functions judge simulated tables whose paired
outcomes have a known true lead (:class:`poptune.evaluate.decisions.Scenario`: ``drop`` is POP - baseline, a
fraction; ``flip_rate`` the share of items the two methods answer differently):

- **error** (:func:`table_error`): every row of an R-row table with no true lead; the share of tables with any
  verdict, which Bonferroni keeps at or below 5% whatever the rows' dependence;
- **power** (:func:`row_power`): one row with a true lead, at the table's per-row confidence; the share of tables
  in which it is decided the right way (and, separately, the wrong way).

``benchmarks/methods_decisions.py`` runs both at the sizes of the committed tables and writes
``leaderboards/methods-decisions-simulated-<hardware>.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from poptune.errors import ConfigError

__all__ = ["TableRates", "row_power", "table_error"]


@dataclass(frozen=True)
class TableRates:
    """Shares of simulated tables: ``right`` decided the true way, ``wrong`` the other way (for a null scenario
    every verdict is wrong), with the binomial standard error of a share."""

    scenario: Any
    rows: int
    tasks: int
    per_task: int
    replicates: int
    right: float
    wrong: float

    def standard_error(self, share: float) -> float:
        return (share * (1 - share) / self.replicates) ** 0.5


def _check(rows: int, tasks: int, per_task: int, replicates: int) -> None:
    if min(rows, tasks, per_task, replicates) < 1:
        raise ConfigError(f"a simulated table needs >= 1 row, task, item and replicate, got {rows}, {tasks}, "
                          f"{per_task}, {replicates}")


def _verdicts(scenario: Any, rows: int, tasks: int, per_task: int, rng: Any, table_rows: int) -> list[str]:
    from poptune.comparison.board import lead_of, verdict_of

    verdicts = []
    for _ in range(rows):
        drawn = [scenario.draw(rng, per_task) for _ in range(tasks)]
        pop = {f"t{k}": d[0] for k, d in enumerate(drawn)}  # the scenario's "full" side is POP here
        baseline = {f"t{k}": d[1] for k, d in enumerate(drawn)}
        verdicts.append(verdict_of(lead_of(pop, baseline, table_rows)))
    return verdicts


def table_error(scenario: Any, *, rows: int, tasks: int, per_task: int, replicates: int = 200,
                seed: int = 0) -> TableRates:
    """The share of ``rows``-row tables, every row behaving as ``scenario`` (no true lead), with any verdict."""
    import numpy as np

    _check(rows, tasks, per_task, replicates)
    if scenario.drop != 0:
        raise ConfigError(f"the error of a table is read with no true lead, got {scenario.drop}")
    rng = np.random.default_rng(seed)
    wrong = sum(any(not v.startswith("undecided") for v in _verdicts(scenario, rows, tasks, per_task, rng, rows))
                for _ in range(replicates))
    return TableRates(scenario, rows, tasks, per_task, replicates, 0.0, wrong / replicates)


def row_power(scenario: Any, *, rows: int, tasks: int, per_task: int, replicates: int = 200,
              seed: int = 0) -> TableRates:
    """How often one row with ``scenario``'s true lead (POP - baseline > 0) is decided, at the confidence of a
    ``rows``-row table: ``right`` (POP more accurate) and ``wrong`` (baseline more accurate)."""
    import numpy as np

    _check(rows, tasks, per_task, replicates)
    if scenario.drop <= 0:
        raise ConfigError(f"power is read with a true lead of POP (> 0), got {scenario.drop}")
    rng = np.random.default_rng(seed)
    verdicts = [_verdicts(scenario, 1, tasks, per_task, rng, rows)[0] for _ in range(replicates)]
    return TableRates(scenario, rows, tasks, per_task, replicates,
                      verdicts.count("POP more accurate") / replicates,
                      verdicts.count("baseline more accurate") / replicates)
