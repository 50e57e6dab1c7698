"""A study's Pareto front of POP configurations, as stored (confirmed figures where the study has them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from poptune.engine import PopConfig
from poptune.errors import MeasurementError
from poptune.interval import Interval
from poptune.objectives.accuracy import ACCURACY
from poptune.objectives.base import References
from poptune.objectives.registry import DEFAULT, OBJECTIVES, dominates, named
from poptune.objectives.ttft import TTFT
from poptune.store.attributes import StoredStudy
from poptune.store.measurement import Measurement
from poptune.store.trials import StoredTrial, completed, confirmations

if TYPE_CHECKING:
    import optuna

__all__ = ["FrontRow", "candidates", "certified", "front", "nondominated", "pareto", "trusted"]


def pareto(trials: list["optuna.trial.FrozenTrial"], objectives: Sequence[str] = DEFAULT
           ) -> list["optuna.trial.FrozenTrial"]:
    """The trials no other trial dominates on the study's ``objectives`` (each its own direction,
    :func:`poptune.objectives.registry.dominates`)."""
    values = [named(objectives, t.values) for t in trials]
    return [t for t, mine in zip(trials, values)
            if not any(dominates(other, mine, objectives) for other in values if other)]


class _Revised:
    """A stored measurement with some of its figures given anew (the row's speedup, a confirmation's, a
    certification's accuracy): what the objectives read for a row. Every other attribute is the measurement's."""

    def __init__(self, measurement: Measurement | StoredTrial, figures: Mapping[str, Any]) -> None:
        self._measurement, self._figures = measurement, dict(figures)

    def __getattr__(self, name: str) -> Any:
        if name in self._figures:
            return self._figures[name]
        return getattr(self._measurement, name)


def _values(trial: StoredTrial, objectives: Sequence[str], references: References, row: Mapping[str, Any],
            revised: Mapping[str, Any]) -> dict[str, float]:
    """A row's figure on every objective, by name.

    The study's ``objectives`` keep the values the trial returned (what its front was decided on); every other
    objective is read from the trial's measurement against the study's ``references``, its speedup the row's
    (``row``: the target length's, or the workload's combined figure). Where a confirmation or a certification
    measured a figure anew (``revised``: the measurement's attributes it gives, ``speedup``,
    ``objective_accuracy``), each objective whose reading it changes is read again with it.
    """
    values = named(objectives, trial.values)
    measured: Measurement | StoredTrial
    try:
        measured = trial.measurement()
    except (KeyError, TypeError, ValueError, MeasurementError):  # stored without a whole measurement: its record
        measured = trial
    before, after = _Revised(measured, row), _Revised(measured, {**row, **revised})
    for objective in OBJECTIVES.values():
        try:
            old, new = objective.read(before, references), objective.read(after, references)
        except (AttributeError, KeyError, TypeError, ValueError, ZeroDivisionError, MeasurementError):  # not given
            continue
        if objective.name not in values or new != old:
            values[objective.name] = new
    return values


@dataclass(frozen=True)
class FrontRow:
    """One Pareto-optimal configuration as stored (its confirmed figures where the study has them).

    ``speedup_ci``: the speedup with its 95% interval (None for trials stored before intervals); ``drop_ci``: the
    drop with its paired 95% interval (None where not measured);
    ``pairs``: how many pairs it rests on; ``confirmed``: the figures come from the confirmation pass.
    ``ttft_ms`` and ``full_ttft_ms`` are the raw p50 times to first token of the configuration and of its
    paired full model as the trial measured them (expected over the workload's prompt lengths). ``values``: the
    row's figure on every objective it gives, by name (:mod:`poptune.objectives.registry`), the study's
    objectives' what the front is decided on; :attr:`prefill_ms` and :attr:`accuracy` read two of them.
    """

    trial: int
    config: PopConfig
    method: str
    speedup: float
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
    verdict: str | None = None
    values: dict[str, float] = field(default_factory=dict)

    @property
    def skip(self) -> int:
        return self.config.skip

    @property
    def boundary(self) -> str:
        return self.config.boundary

    @property
    def offset(self) -> int:
        return self.config.offset

    @property
    def kv(self) -> str:
        return self.config.kv

    def to_dict(self) -> dict[str, Any]:
        """The row as ``poptune pareto --out`` writes it: every field, the configuration's as its fields (``skip``,
        ``boundary``, ``offset``, ``layers`` where given, ``kv`` always), each interval as its ends under the names of
        the written format (``drop_lo``/``drop_hi``, ``speedup_lo``/``speedup_hi``; None where there is none)."""
        out: dict[str, Any] = {}
        record = {**self.config.to_dict(), "kv": self.config.kv}
        for key, value in asdict(replace(self, drop_ci=None, speedup_ci=None)).items():
            if key == "config":
                out.update((k, v) for k, v in record.items() if k != "kv")
            elif key in ("drop_ci", "speedup_ci"):
                ci: Interval | None = getattr(self, key)
                out[f"{key[:-3]}_lo"], out[f"{key[:-3]}_hi"] = ci.ends() if ci is not None else (None, None)
            elif key == "verdict":
                out["kv"], out[key] = record["kv"], value
            else:
                out[key] = value
        return out

    @property
    def prefill_ms(self) -> float | None:
        """The latency objective's figure (the study's reference full-model TTFT over the speedup; None where the
        row has none)."""
        return self.values.get(TTFT.name)

    @property
    def accuracy(self) -> float:
        """The accuracy objective's figure (the full model's on the reference items minus the paired drop)."""
        return self.values[ACCURACY.name]

    @property
    def label(self) -> str:
        """The configuration's label (:attr:`poptune.engine.config.PopConfig.label`)."""
        return self.config.label

    @classmethod
    def from_trial(cls, trial: "optuna.trial.FrozenTrial | StoredTrial", confirmed: dict[str, Any] | None = None,
                   references: References | None = None, objectives: Sequence[str] = DEFAULT, *,
                   revised: Mapping[str, Any] | None = None) -> "FrontRow":
        """The row of ``trial`` in a study of ``objectives`` read against its ``references``; with ``confirmed``
        figures those instead; ``revised``: more of its measurement's figures given anew (a certification's
        ``objective_accuracy``)."""
        t = trial if isinstance(trial, StoredTrial) else StoredTrial.of(trial)
        target: dict[str, Any] = dict(t.target_row)
        if t.weighted:  # a workload-weighted trial: its combined figures
            ci = t.speedup_ci
            target = {"speedup": t.speedup, "speedup_lo": ci and ci.lo, "speedup_hi": ci and ci.hi, "pairs": t.pairs,
                      "ideal": t.ideal}
        figures = confirmed or target
        speedup = float(figures.get("speedup", t.speedup))
        anew = {"speedup": speedup} if confirmed else {}
        row = {"speedup": float(target.get("speedup", t.speedup))}
        values = _values(t, objectives, references if references is not None else References(), row,
                         {**anew, **(revised or {})})
        return cls(
            trial=t.number,
            config=t.config,
            method=t.method,
            speedup=speedup,
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
    stored = StoredStudy.of(study)
    objectives, references = stored.objectives, stored.references
    rows: dict[tuple, FrontRow] = {}
    for trial in map(StoredTrial.of, completed(study)):
        if not trial.feasible or trial.reused_from is not None:
            continue
        mine = figures.get(str(trial.number))
        if not trusted(trial, mine):
            continue
        row = FrontRow.from_trial(trial, mine, references, objectives)
        key = (row.method, row.config)
        if key not in rows or (row.confirmed and not rows[key].confirmed):
            rows[key] = row
    return nondominated(list(rows.values()), objectives)


def nondominated(rows: list[FrontRow], objectives: Sequence[str] = DEFAULT) -> list[FrontRow]:
    """The ``rows`` no other of them dominates on ``objectives`` (their :attr:`FrontRow.values`), fastest first:
    :func:`front`'s last step (the pipeline's simulation, :mod:`poptune.tune.pipelinesim`, selects by it too)."""
    best = [r for r in rows if not any(dominates(o.values, r.values, objectives) for o in rows)]
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
    references = stored.references
    rows = []
    for entry in record.get("candidates", []):
        trial = StoredTrial.of(study.trials[int(entry["trial"])])
        row = FrontRow.from_trial(trial, figures.get(str(trial.number)), references, stored.objectives)
        drop = entry.get("drop")
        if drop is not None:  # accuracy: on the fresh items (older records: the search's reference minus their drop)
            accuracy = float(entry["accuracy"]) if entry.get("accuracy") is not None else \
                row.accuracy + (row.drop - float(drop["mean"])) / 100
            certified = FrontRow.from_trial(trial, figures.get(str(trial.number)), references, stored.objectives,
                                            revised={"objective_accuracy": accuracy})
            row = replace(row, drop=float(drop["mean"]),
                          drop_ci=Interval(float(drop["mean"]), float(drop["lo"]), float(drop["hi"])),
                          items=int(entry["items"]), values=certified.values)
        rows.append(replace(row, verdict=str(entry["verdict"])))
    return rows
