"""What a study measured, to answer configurations from without a model: a stored study or a grid file.

A :class:`Replay` answers configurations from what was measured: a stored study (:meth:`Replay.of`) or a grid
file (:meth:`Replay.from_csv`, see :mod:`poptune.problem.grid`), exactly as recorded or, with a noise seed, drawn
from each figure's recorded 95% interval (:func:`poptune.problem.grid.draw`: one draw per seed and
configuration, so a configuration asked again gets the same answer, as a study answers it from storage). The
replay environment (:mod:`poptune.env`) and the tuner table (:mod:`poptune.tune.efficiency`) both read it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from poptune import store
from poptune.engine import PopConfig
from poptune.errors import ConfigError
from poptune.kv import registry as kv_registry
from poptune.problem.grid import draw, noise_rng, read_grid
from poptune.problem.problem import TuningProblem
from poptune.problem.space import all_configs
from poptune.store.measurement import Measurement

if TYPE_CHECKING:
    import numpy as np
    import optuna

__all__ = ["Replay", "covers_grid"]


@dataclass(frozen=True)
class Replay:
    """What a study measured, to answer configurations from (no model).

    Attributes:
        study_name: The study (or grid file) replayed.
        num_layers: Its model's layers (the search space).
        table: Per configuration, its measurement (a trusted trial first, see :func:`poptune.store.measured_table`).
        max_drop: The study's accuracy budget (None: none).
        reference_ms: The study's reference full-model TTFT: the latency objective is it over the speedup.
        noise_seed: None: answers are the recorded figures; a seed: drawn from their intervals (see the module).
    """

    study_name: str
    num_layers: int
    table: dict[PopConfig, Measurement]
    max_drop: float | None
    reference_ms: float | None = None
    noise_seed: int | None = None

    @classmethod
    def of(cls, study: "optuna.Study") -> "Replay":
        stored = store.StoredStudy.of(study)
        problem = TuningProblem.from_dict(stored.problem)
        return cls(study.study_name, stored.num_layers, store.measured_table(study), problem.max_drop,
                   stored.reference_ms)

    @classmethod
    def from_csv(cls, path: str | Path) -> "Replay":
        """The replay of a grid file (:func:`poptune.problem.grid.read_grid`; a bad file is an InputError)."""
        grid = read_grid(path)
        return cls(grid.name, grid.num_layers, grid.measurements, grid.max_drop, grid.reference_ms)

    @property
    def kv(self) -> tuple[str, ...]:
        """The K/V sources of the replayed space: calibrated too where the table holds such configurations."""
        return tuple(k for k in kv_registry.NAMES if kv_registry.is_default(k) or any(c.kv == k for c in self.table))

    def noisy(self, seed: int | None) -> "Replay":
        """This replay answering with noise drawn under ``seed`` (None: the recorded figures)."""
        return replace(self, noise_seed=seed)

    def answer(self, config: PopConfig, rng: "np.random.Generator | None" = None) -> Measurement:
        """The measurement of ``config``: drawn from ``rng`` when given, else under :attr:`noise_seed`, else as
        recorded.

        Raises:
            ConfigError: the study never measured it.
        """
        if config not in self.table:
            raise ConfigError(f"the study {self.study_name!r} holds no measurement of {config}")
        recorded = self.table[config]
        if rng is None:
            if self.noise_seed is None:
                return recorded
            rng = noise_rng(self.noise_seed, config)
        return draw(recorded, rng)


def covers_grid(replay: Replay) -> bool:
    """Whether the stored study measured every configuration of the search space."""
    return set(all_configs(replay.num_layers, replay.kv)) <= set(replay.table)
