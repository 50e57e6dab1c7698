"""A study's Pareto front of POP configurations, as stored (confirmed figures where the study has them)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from poptune.engine import PopConfig
from poptune.interval import Interval
from poptune.kv import registry as kv_registry
from poptune.objectives.registry import DEFAULT, dominates, named
from poptune.store.attributes import StoredStudy
from poptune.store.trials import StoredTrial, completed, confirmations, latency_objective, reference_ms

if TYPE_CHECKING:
    import optuna

__all__ = ["FrontRow", "candidates", "certified", "front", "pareto", "trusted"]


def pareto(trials: list["optuna.trial.FrozenTrial"], objectives: Sequence[str] = DEFAULT
           ) -> list["optuna.trial.FrozenTrial"]:
    """The trials no other trial dominates on the study's ``objectives`` (each its own direction,
    :func:`poptune.objectives.registry.dominates`)."""
    values = [named(objectives, t.values) for t in trials]
    return [t for t, mine in zip(trials, values)
            if not any(dominates(other, mine, objectives) for other in values if other)]


@dataclass(frozen=True)
class FrontRow:
    """One Pareto-optimal configuration as stored (its confirmed figures where the study has them).

    ``speedup_ci``: the speedup with its 95% interval (None for trials stored before intervals); ``drop_ci``: the
    drop with its paired 95% interval (None where not measured);
    ``pairs``: how many pairs it rests on; ``confirmed``: the figures come from the confirmation pass.
    ``prefill_ms`` is the latency objective (the study's reference full-model TTFT over the speedup);
    ``ttft_ms`` and ``full_ttft_ms`` are the raw p50 times to first token of the configuration and of its
    paired full model as the trial measured them (expected over the workload's prompt lengths). ``values``: the
    study's objectives by name (:mod:`poptune.objectives.registry`; TTFT and accuracy as ``prefill_ms`` and
    ``accuracy`` say them), what the front is decided on.
    """

    trial: int
    skip: int
    boundary: str
    offset: int
    method: str
    prefill_ms: float | None
    speedup: float
    accuracy: float
    drop: float
    feasible: bool
    drop_ci: Interval | None = None
    items: int | None = None
    speedup_ci: Interval | None = None
    pairs: int | None = None
    ideal: float | None = None
    confirmed: bool = False
    ttft_ms: float | None = None
    full_ttft_ms: float | None = None
    kv: str = kv_registry.DEFAULT
    verdict: str | None = None
    values: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The row as ``poptune pareto --out`` writes it: every field, each interval as its ends under the names
        of the written format (``drop_lo``/``drop_hi``, ``speedup_lo``/``speedup_hi``; None where there is none)."""
        out: dict[str, Any] = {}
        for key, value in asdict(replace(self, drop_ci=None, speedup_ci=None)).items():
            if key in ("drop_ci", "speedup_ci"):
                ci: Interval | None = getattr(self, key)
                out[f"{key[:-3]}_lo"], out[f"{key[:-3]}_hi"] = ci.ends() if ci is not None else (None, None)
            else:
                out[key] = value
        return out

    @property
    def config(self) -> PopConfig:
        """The POP configuration of the row."""
        return PopConfig(skip=self.skip, boundary=self.boundary, offset=self.offset, kv=self.kv)

    @property
    def label(self) -> str:
        """``skip/boundary/offset`` (``/<kv>`` for a K/V source other than the paper's), or ``full model``."""
        if self.skip == 0:
            return "full model"
        return f"{self.skip}/{self.boundary}/{self.offset}" + ("" if kv_registry.is_default(self.kv) else f"/{self.kv}")

    @classmethod
    def from_trial(cls, trial: "optuna.trial.FrozenTrial | StoredTrial", confirmed: dict[str, Any] | None = None,
                   reference_ms: float | None = None, objectives: Sequence[str] = DEFAULT) -> "FrontRow":
        """The row of ``trial`` in a study of ``objectives``; with ``confirmed`` figures (and the study's reference
        latency) those instead."""
        t = trial if isinstance(trial, StoredTrial) else StoredTrial.of(trial)
        target: dict[str, Any] = dict(t.target_row)
        if t.weighted:  # a workload-weighted trial: its combined figures
            ci = t.speedup_ci
            target = {"speedup": t.speedup, "speedup_lo": ci and ci.lo, "speedup_hi": ci and ci.hi, "pairs": t.pairs,
                      "ideal": t.ideal}
        figures = confirmed or target
        speedup = float(figures.get("speedup", t.speedup))
        values = named(objectives, t.values)
        prefill_ms = values.get("ttft", latency_objective(reference_ms, speedup) if reference_ms else t.ttft_ms)
        if confirmed and reference_ms:
            prefill_ms = latency_objective(reference_ms, speedup)
        accuracy = values.get("accuracy", t.objective_accuracy)
        if "ttft" in values and prefill_ms is not None:  # not None: read from values, or computed
            values["ttft"] = prefill_ms
        if "accuracy" in values:
            values["accuracy"] = accuracy
        return cls(
            trial=t.number,
            skip=t.config.skip,
            boundary=t.config.boundary,
            offset=t.config.offset,
            method=t.method,
            prefill_ms=prefill_ms,
            speedup=speedup,
            accuracy=accuracy,
            drop=t.drop_points,
            feasible=t.feasible,
            drop_ci=t.drop_ci,
            items=t.items,
            speedup_ci=Interval.from_ends(speedup, (figures.get("speedup_lo"), figures.get("speedup_hi"))),
            pairs=figures.get("pairs"),
            ideal=figures.get("ideal", target.get("ideal")),
            confirmed=bool(confirmed),
            ttft_ms=t.ttft_ms,
            full_ttft_ms=t.full_ttft_ms,
            kv=t.config.kv,
            values=values,
        )


def trusted(trial: StoredTrial, confirmed: dict[str, Any] | None) -> bool:
    """Not marked noisy (or confirmed since) and not confirmed above its ideal."""
    if confirmed is not None:
        return not confirmed.get("above_ideal")
    return not trial.noisy


def front(study: "optuna.Study", *, confirmed: bool = True) -> list[FrontRow]:
    """POP's Pareto front (feasible trials only when the study has an accuracy budget), fastest first.

    Trials marked ``noisy`` (a failed null check, a speedup above its ideal) are left out. With ``confirmed``
    (the default) the confirmation pass's figures (study attribute ``confirmation``) replace the trials' own and
    the front is recomputed from them; a configuration confirmed above its ideal is left out too. A
    configuration measured by several trials counts once: its confirmed trial, else its first trusted one.
    """
    figures = confirmations(study) if confirmed else {}
    reference = reference_ms(study)
    objectives = StoredStudy.of(study).objectives
    rows: dict[tuple, FrontRow] = {}
    for trial in map(StoredTrial.of, completed(study)):
        if not trial.feasible or trial.reused_from is not None:
            continue
        mine = figures.get(str(trial.number))
        if not trusted(trial, mine):
            continue
        row = FrontRow.from_trial(trial, mine, reference, objectives)
        key = (row.method, row.skip, row.boundary, row.offset, row.kv)
        if key not in rows or (row.confirmed and not rows[key].confirmed):
            rows[key] = row
    candidates = list(rows.values())
    best = [r for r in candidates if not any(dominates(o.values, r.values, objectives) for o in candidates)]
    return sorted(best, key=lambda r: (r.prefill_ms, -r.accuracy, r.trial))


def candidates(rows: list[FrontRow], max_drop: float | None, count: int) -> list[FrontRow]:
    """The certification's candidates among front ``rows``: POP rows (not the full model) whose drop so far is
    within ``max_drop``, the fastest ``count`` of them."""
    return [r for r in rows if r.method == "pop" and r.skip > 0 and (max_drop is None or r.drop <= max_drop)][:count]


def certified(study: "optuna.Study") -> list[FrontRow]:
    """The certification's candidates (study attribute ``certification``, :mod:`poptune.tune.certify`), fastest
    first, each with its verdict and with the drop, interval and items of the fresh items that decided it (its
    speed stays the confirmed or trial's figure). Empty where the study has no certification."""
    from dataclasses import replace

    stored = StoredStudy.of(study)
    record = stored.certification or {}
    figures = confirmations(study)
    reference = reference_ms(study)
    rows = []
    for entry in record.get("candidates", []):
        trial = StoredTrial.of(study.trials[int(entry["trial"])])
        row = FrontRow.from_trial(trial, figures.get(str(trial.number)), reference, stored.objectives)
        drop = entry.get("drop")
        if drop is not None:  # accuracy: on the fresh items (older records: the search's reference minus their drop)
            accuracy = float(entry["accuracy"]) if entry.get("accuracy") is not None else \
                row.accuracy + (row.drop - float(drop["mean"])) / 100
            row = replace(row, drop=float(drop["mean"]),
                          drop_ci=Interval(float(drop["mean"]), float(drop["lo"]), float(drop["hi"])),
                          items=int(entry["items"]), accuracy=accuracy)
        rows.append(replace(row, verdict=str(entry["verdict"])))
    return rows
