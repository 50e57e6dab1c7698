"""What a study tells its user: the front within its budget, two reference rows, a summary file and a plot.

The reference rows are always shown, on the front or not: the full model (its accuracy is the reference; its
trial times it against itself, an A/A check whose speedup is 1 up to noise) and the paper's rule (skip the last third,
``last``), each with why it is or is not on
the front. :class:`StudyReport` reads all of it from a study once, and renders it as the command's text, the
Markdown summary and the plot; :meth:`StudyReport.write` writes the summary and the plot side by side
(``<storage>.<study>.md``, ``<storage>.<study>.pareto.png``: :mod:`poptune.reports.naming`).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from poptune import store
from poptune.engine import PopConfig
from poptune.evaluate.judges import ACCURACY_JUDGE, LIKELIHOOD_JUDGE, judge_of
from poptune.files import write_text
from poptune.interval import Interval
from poptune.kv import registry as kv_registry
from poptune.measure.provenance import typed_command
from poptune.objectives.accuracy import ACCURACY
from poptune.objectives.base import References
from poptune.objectives.registry import DEFAULT, get, named, weakly_dominates
from poptune.reports import certification as certreport
from poptune.reports.naming import owner_line, report_paths
from poptune.reports.prompts_lines import AccuracyColumn, accuracy_column, prompts_lines
from poptune.store.front import FrontRow
from poptune.store.trials import StoredTrial
from poptune.tune.certify import ERROR

if TYPE_CHECKING:
    import optuna

__all__ = ["Reference", "StudyReport", "references", "undecided", "front_table", "verdict_table", "verdict_line",
           "summary_markdown", "front_plot"]

#: What the embedded tasks are (the real tasks are named by their lm-eval names).
_TASKS = {"passkey": "synthetic passkey retrieval", "kv_recall": "synthetic key-value recall"}

#: A likelihood-judged study's note beside its front: what its accuracy column and drops are.
LIKELIHOOD_NOTE = ("judged by likelihood (--judge likelihood): the answer prob column is the mean probability of the "
                   "full model's answer tokens under each configuration's prefill, and every drop, budget and verdict "
                   "here is that likelihood's (x100), never the tasks' accuracy (the verdict's lines below say the "
                   "accuracy drop on the same items)")


@dataclass(frozen=True)
class Reference:
    """A reference configuration of a study: its stored row (None if not measured) and where it stands."""

    name: str
    config: PopConfig
    row: FrontRow | None
    status: str


def budget_of(study: "optuna.Study") -> float | None:
    """The study's accuracy budget in points (None: none)."""
    return store.StoredStudy.of(study).max_drop


def default_folder(storage: str | None) -> Path:
    """Where a study's summary and plot go: beside its SQLite or journal file, else ``studies/``."""
    url = storage or store.DEFAULT_STORAGE
    if url.startswith("sqlite:///"):
        return Path(url.removeprefix("sqlite:///").split("?", 1)[0]).parent
    if url.startswith("journal:"):
        return Path(url.removeprefix("journal:")).parent
    return Path("studies")


def _bracket(ci: Interval | None, spec: str) -> str:
    """`` [lo, hi]`` of an interval where there is one, else nothing."""
    return f" {ci.bracket(spec)}" if ci is not None else ""


def _label(row: FrontRow) -> str:
    return row.label


def _trial_of(trials: list[StoredTrial], confirmed: dict[str, Any], config: PopConfig) -> StoredTrial | None:
    """The trial that stands for ``config``: its confirmed one, else its last trusted one, else its first."""
    trials = [t for t in trials if t.reused_from is None and t.config == config]
    for pick in ([t for t in trials if str(t.number) in confirmed], [t for t in trials if not t.noisy]):
        if pick:
            return pick[-1]
    return trials[0] if trials else None


def references(study: "optuna.Study", front: list[FrontRow] | None = None) -> list[Reference]:
    """The full model and the paper's rule, each with its row and whether (and why not) it is on the front."""
    from poptune.problem.space import paper_default

    stored = store.StoredStudy.of(study)
    front = store.front(study) if front is None else front
    trials = [StoredTrial.of(t) for t in store.completed(study)]
    return _references(trials, stored.confirmations, paper_default(stored.num_layers), stored.references, front,
                       stored.max_drop, stored.objectives)


def _references(trials: list[StoredTrial], confirmed: dict[str, Any], paper: PopConfig, references: References,
                front: list[FrontRow], budget: float | None, objectives: tuple[str, ...] = DEFAULT
                ) -> list[Reference]:
    out = []
    for name, config in (("full model", PopConfig(skip=0)), ("paper's rule", paper)):
        trial = _trial_of(trials, confirmed, config)
        if trial is None:
            out.append(Reference(name, config, None, "not measured in this study"))
            continue
        mine = confirmed.get(str(trial.number))
        row = FrontRow.from_trial(trial, mine, references, objectives)
        out.append(Reference(name, config, row, _status(row, trial, mine, front, budget, objectives)))
    return out


def _status(row: FrontRow, trial: StoredTrial, confirmed: dict[str, Any] | None, front: list[FrontRow],
            budget: float | None, objectives: tuple[str, ...] = DEFAULT) -> str:
    if any(r.trial == row.trial for r in front):
        return "on the front"
    reasons = []
    if not row.feasible and budget is not None:  # the search rejects on the lower end (poptune.tune.objective)
        lower = row.drop_ci.lo if row.drop_ci is not None else row.drop
        reasons.append(f"drop's 95% lower bound {lower:+.2f} > budget {budget:.2f} points")
    if (confirmed or {}).get("above_ideal") or (confirmed is None and trial.noisy):
        reasons.append("a null check failed on its timing (noisy)")
    better = [r for r in front if weakly_dominates(r.values, row.values, objectives)]
    if better and not reasons:
        reasons.append(f"trial {better[0].trial} ({_label(better[0])}) is " + (
            "as fast and as accurate or better" if objectives == DEFAULT else
            f"as good or better on every objective ({', '.join(objectives)})"))
    return "off the front" + (": " + "; ".join(reasons) if reasons else "")


def undecided(study: "optuna.Study") -> list[FrontRow]:
    """Configurations faster than the full model whose drop interval straddles the budget at the item cap: more
    items (``--limit``) would decide them. Fastest first."""
    return _undecided([StoredTrial.of(t) for t in store.completed(study)], budget_of(study))


def _undecided(trials: list[StoredTrial], budget: float | None) -> list[FrontRow]:
    if budget is None:
        return []
    rows = [FrontRow.from_trial(t) for t in trials if t.measured and t.drop_ci]
    return sorted((r for r in rows if r.skip and r.speedup > 1 and r.drop_ci is not None
                   and r.drop_ci.lo <= budget < r.drop_ci.hi), key=lambda r: -r.speedup)


def undecided_line(rows: list[FrontRow], budget: float | None, judge: str = ACCURACY_JUDGE) -> str:
    """One line naming the undecided configurations, or nothing (``judge``: what the budget bounds)."""
    if not rows:
        return ""
    named = "; ".join(f"{_label(r)} {r.speedup:.2f}x, drop {r.drop:+.2f}{_bracket(r.drop_ci, '+.2f')} on "
                      f"{r.items} items" for r in rows[:4])
    more = f"; and {len(rows) - 4} more" if len(rows) > 4 else ""
    assert budget is not None  # rows are undecided against a budget
    return (f"undecided by the search at its item cap (the drop's interval contains "
            f"{certreport.budget_words(budget, judge)}): {named}{more}")


#: The table's columns before and after the study's objectives (one column each, in their order).
_HEAD = ("trial", "configuration", "speedup [95% CI]", "pairs", "ideal", "TTFT ms", "full ms")
_TAIL = ("drop [95% CI]", "items")


def level(confidence: float) -> str:
    """A confidence as its table label says it: ``95``, ``97.5``, ``98.75``, ``99.375``."""
    return f"{100 * float(confidence):.6g}"


def _columns(accuracy: AccuracyColumn | None, objectives: tuple[str, ...] = DEFAULT,
             confidence: float = 0.95) -> tuple[str, ...]:
    """The table's header; the drop's column says the level its intervals hold at (issue 58: a certification's
    are at 97.5%, 98.75%, ..., never labelled 95%)."""
    labels = tuple(accuracy.title if accuracy is not None and n == accuracy.objective else get(n).label
                   for n in objectives)
    return _HEAD + labels + (f"drop [{level(confidence)}% CI]", *_TAIL[1:])


def _cells(row: FrontRow, accuracy: AccuracyColumn | None = None, objectives: tuple[str, ...] = DEFAULT) -> list[str]:
    interval = _bracket(row.speedup_ci, ".3f")
    drop = f"{row.drop:+.2f}" + _bracket(row.drop_ci, "+.2f")

    def ms(v: float | None) -> str:
        return f"{v:.1f}" if v is not None else ""

    values = [accuracy.cell(row) if accuracy is not None and n == accuracy.objective else
              get(n).cell(v) if (v := row.values.get(n)) is not None else "" for n in objectives]
    return [str(row.trial), _label(row), f"{row.speedup:.3f}x{interval}{'*' if row.confirmed else ''}",
            str(row.pairs or ""), f"{row.ideal:.2f}x" if row.ideal is not None else "", ms(row.ttft_ms),
            ms(row.full_ttft_ms), *values, drop, str(row.items or "")]


def _objective_notes(objectives: tuple[str, ...]) -> list[str]:
    """What the study's objectives beyond TTFT and accuracy are (none for a study of those two)."""
    extra = [get(n) for n in objectives if n not in DEFAULT]
    return [f"{o.label}: {o.about}" for o in extra] + (
        [f"the front: Pareto-optimal on the study's objectives, {', '.join(objectives)}"] if extra else [])


def _notes(rows: list[FrontRow], reference_ms: float | None) -> list[str]:
    notes = ["TTFT ms / full ms: the configuration's and its paired full model's p50 time to first token as the trial "
             "measured them (expected over the workload's prompt lengths); objective ms: "
             + (f"the study's reference full-model TTFT ({reference_ms:.1f} ms) " if reference_ms else "the study's "
                "reference full-model TTFT ")
             + "over the speedup, what ranks trials however busy the machine was; accuracy: the full model's on the "
             "reference items minus the paired drop (points, full - POP)"]
    if any(r.confirmed for r in rows):
        notes.append("*: figures of the confirmation pass (configurations re-timed together after the search)")
    return notes


def front_table(rows: list[FrontRow], refs: Sequence[Reference] = (), *, reference_ms: float | None = None,
                markdown: bool = False, accuracy: AccuracyColumn | None = None,
                objectives: tuple[str, ...] = DEFAULT, confidence: float = 0.95) -> str:
    """The front and the reference rows as a fixed-width table (or Markdown), one column per objective of the
    study's ``objectives``, with what each column means (``accuracy``: the accuracy column of a prompts study,
    :func:`poptune.reports.prompts_lines.accuracy_column`); ``confidence``: the drops' intervals' two-sided level."""
    columns = _columns(accuracy, objectives, confidence)
    body = [_cells(r, accuracy, objectives) for r in rows]
    extra = [(ref, _cells(ref.row, accuracy, objectives)) for ref in refs if ref.row is not None]
    shown = [ref.row for ref, _ in extra if ref.row is not None]  # each of extra has its row
    notes = _notes(rows + shown, reference_ms) + _objective_notes(objectives)
    if accuracy is not None:
        notes.append(accuracy.note)
    if markdown:
        lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(cells) + " |" for cells in body]
        if refs:
            lines += ["", "| reference | " + " | ".join(columns) + " | status |", "|" + "---|" * (len(columns) + 2)]
            lines += [f"| {ref.name} | " + " | ".join(cells) + f" | {ref.status} |" for ref, cells in extra]
            lines += [f"| {ref.name} | " + " | ".join([""] * len(columns)) + f" | {ref.status} |"
                      for ref in refs if ref.row is None]
        return "\n".join(lines + [""] + [f"- {n}" for n in notes])
    widths = [max([len(c)] + [len(cells[i]) for cells in body + [c for _, c in extra]])
              for i, c in enumerate(columns)]

    def fmt(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i not in (1,) else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    lines = [fmt(list(columns))] + [fmt(cells) for cells in body]
    if refs:
        lines.append("references:")
        lines += [f"{fmt(cells)}  {ref.name}: {ref.status}" for ref, cells in extra]
        lines += [f"  {ref.name}: {ref.status}" for ref in refs if ref.row is None]
    return "\n".join(lines + notes)


def verdict_table(rows: list[FrontRow], *, reference_ms: float | None = None, markdown: bool = False,
                  accuracy: AccuracyColumn | None = None, record: dict[str, Any] | None = None,
                  objectives: tuple[str, ...] = DEFAULT, confidence: float | None = None) -> str:
    """The certified candidates as :func:`front_table` rows with their verdict (and, given the certification
    ``record``, each one's certified bound: :func:`poptune.reports.certification.verdict_cells`) as the last column.
    The drop's header says the certification's own level (``confidence``, else the record's, else 95%)."""
    if confidence is None:
        confidence = float(record["confidence"]) if record and "confidence" in record else 0.95
    table = front_table(rows, reference_ms=reference_ms, markdown=markdown, accuracy=accuracy,
                        objectives=objectives, confidence=confidence).splitlines()
    head, body = (2, len(rows)) if markdown else (1, len(rows))
    cells = certreport.verdict_cells(rows, record)
    if markdown:
        table[0] += " verdict |"
        table[1] += "---|"
        lines = table[:head] + [line + f" {c} |" for line, c in zip(table[head:head + body], cells)]
    else:
        lines = [table[0] + "  verdict"] + [line + f"  {c}" for line, c in zip(table[1:1 + body], cells)]
    return "\n".join(lines + table[head + body:])


def verdict_line(study: "optuna.Study") -> str:
    """What the certification decided, in one line: the fastest configuration certified within the budget."""
    stored = store.StoredStudy.of(study)
    return certreport.verdict_line(store.certified(study), stored.certification, stored.max_drop,
                                   stored.confirmations, judge_of(stored.problem.get("tasks", ())),
                                   stored.problem.get("runtime", "hf"))


def order_line(study: "optuna.Study") -> str:
    """What the order of POP's space implied (:mod:`poptune.tune.structured`) and how much of it later trials
    bore out: implied verdicts are never counted as measured, and this line is where they are checked."""
    return _order_line(_spot_checks(study, store.completed(study)))


def _spot_checks(study: "optuna.Study", trials: list["optuna.trial.FrozenTrial"]) -> list[Any]:
    from poptune.tune.structured import reads, spot_checks

    stored = store.StoredStudy.of(study)
    num_layers = stored.num_layers if stored.recorded else 0
    if not reads(stored.objectives):
        return []  # the order's verdicts are read on TTFT and accuracy
    return spot_checks(trials, num_layers, stored.max_drop, stored.kv, stored.objectives)


def _order_line(checks: list[Any]) -> str:
    if not checks:
        return "implied verdicts (by the order of POP's space): no trial measured a configuration with one"
    held = sum(c.held for c in checks)
    trials = ", ".join(f"{c.trial} ({'within' if c.implied_within else 'beyond'})" for c in checks)
    return (f"implied verdicts (by the order of POP's space) measured by a later trial: {held} of {len(checks)} "
            f"held (trials {trials})")


def _plot_point(row: FrontRow, objectives: tuple[str, ...] = DEFAULT) -> Any:
    """A front row on the speedup/accuracy plot, labelled with its configuration and, in a study of more
    objectives, their values (``9/last/0, K/V MiB 0.88``): the plot's two axes are TTFT and accuracy."""
    from poptune.plots import PlotPoint

    drop_range = None
    if row.drop_ci is not None:  # accuracy = reference - drop: the ends swap
        base = 100 * row.accuracy + row.drop
        drop_range = (base - row.drop_ci.hi, base - row.drop_ci.lo)
    speed_range = row.speedup_ci.ends() if row.speedup_ci is not None else None
    extra = [f"{get(n).label} {get(n).cell(row.values[n])}" for n in objectives if n not in DEFAULT and n in row.values]
    return PlotPoint(row.speedup, 100 * row.accuracy, ", ".join([_label(row), *extra]), speed_range, drop_range)


def front_plot(study: "optuna.Study", path: str | Path) -> Path:
    """The study's plot: every trial, the front (error bars, step line), the references and the budget."""
    return StudyReport.of(study).plot(path)


def _duration(run: dict[str, Any]) -> str:
    if not run.get("started") or not run.get("finished"):
        return "unfinished or not recorded"
    seconds = (_dt.datetime.fromisoformat(run["finished"]) - _dt.datetime.fromisoformat(run["started"])).total_seconds()
    return f"{run['started']} to {run['finished']} ({int(seconds // 60)} min {int(seconds % 60)} s)"


def summary_markdown(study: "optuna.Study", plot: str | None = None) -> str:
    """The study's summary: what it measured and for how long, its front, the references, the null checks."""
    return StudyReport.of(study).markdown(plot)


@dataclass(frozen=True)
class StudyReport:
    """What a study's report shows, read from the study once, and its three renderings: the command's text
    (:meth:`text`), the Markdown summary (:meth:`markdown`) and the plot (:meth:`plot`).

    Attributes:
        name: The study's name.
        stored: Its attributes, read once (:meth:`poptune.store.attributes.StoredStudy.snapshot`).
        trials: POP's completed trials, in number order (answers from storage and re-measures too).
        baselines: The baselines' completed trials.
        front: POP's search front within the budget (:func:`poptune.store.front.front`).
        references: The full model and the paper's rule, with where each stands.
        certified: The certification's candidates with their verdicts (:func:`poptune.store.front.certified`).
        undecided: Configurations whose drop interval straddles the budget at the item cap.
        spot_checks: The implied verdicts later trials measured (:func:`poptune.tune.structured.spot_checks`).
    """

    name: str
    stored: store.StoredStudy = field(repr=False)
    trials: list[StoredTrial]
    baselines: list[StoredTrial]
    front: list[FrontRow]
    references: list[Reference]
    certified: list[FrontRow]
    undecided: list[FrontRow]
    spot_checks: list[Any]

    @classmethod
    def of(cls, study: "optuna.Study") -> "StudyReport":
        """Read ``study`` once: its attributes, its trials, its front, references and certification."""
        from poptune.problem.space import paper_default

        stored = store.StoredStudy.snapshot(study)
        completed = store.completed(study)
        trials = [StoredTrial.of(t) for t in completed]
        budget = stored.max_drop
        front = store.front(study)
        refs = _references(trials, stored.confirmations, paper_default(stored.num_layers), stored.references, front,
                           budget, stored.objectives)
        return cls(name=study.study_name, stored=stored, trials=trials,
                   baselines=[t for t in map(StoredTrial.of, store.completed(study, method=None)) if not t.is_pop],
                   front=front, references=refs, certified=store.certified(study),
                   undecided=_undecided(trials, budget), spot_checks=_spot_checks(study, completed))

    @property
    def budget(self) -> float | None:
        """The accuracy budget in points (None: none)."""
        return self.stored.max_drop

    @property
    def judge(self) -> str:
        """What the budget bounds: ``accuracy``, or ``likelihood`` (:mod:`poptune.evaluate.judges`)."""
        return judge_of(self.stored.problem.get("tasks", ()))

    @property
    def reference_ms(self) -> float | None:
        return self.stored.reference_ms

    @property
    def measured(self) -> list[StoredTrial]:
        """The trials that measured their configuration (no answer from storage, no re-measure)."""
        return [t for t in self.trials if t.measured]

    def accuracy_column(self, *, certified: bool = False) -> AccuracyColumn | None:
        """A prompts study's accuracy column (answers unchanged, exact interval); None for any other study."""
        return accuracy_column(self.stored, certified=certified) or (
            certreport.likelihood_column() if self.judge == LIKELIHOOD_JUDGE else None)

    def prompts_lines(self) -> list[str]:
        """A prompts study's lines for the front and the reference rows (empty for any other study)."""
        rows = self.front + [r.row for r in self.references if r.row is not None]
        return prompts_lines(self.stored, self.trials, rows)

    def verdict_line(self) -> str:
        """What the certification decided, in one line."""
        return certreport.verdict_line(self.certified, self.stored.certification, self.budget,
                                       self.stored.confirmations, self.judge, self.stored.problem.get("runtime", "hf"))

    def cost_lines(self) -> list[str]:
        """What a verdict on each undecided candidate would cost here
        (:func:`poptune.reports.certification.cost_lines`)."""
        return certreport.cost_lines(self.certified, self.stored.certification, self.budget, self.stored.runs,
                                     self.judge)

    def text(self, *, asked: int | None = None) -> str:
        """The command's closing report: what the study holds, the front with the reference rows, the
        certification and its verdict, the last null checks and the baselines (``asked``: the trials the command
        asked for, of a study that held them already)."""
        measured, budget = self.measured, self.budget
        lines = []
        if asked is not None:
            lines.append(f"study {self.name} holds its {len(measured)} measured configurations (--trials {asked}): "
                         "nothing to measure; `--add N` measures N more")
        lines.append(f"study {self.name}: {len(measured)} measured configurations ({len(self.trials)} completed trials "
                     "with answers from storage and re-measures); search front (not yet a verdict: drops on the items "
                     "that selected them" + (f"; rows not rejected by {certreport.budget_words(budget, self.judge)}):"
                                             if budget is not None else "):"))
        if self.judge == LIKELIHOOD_JUDGE:
            lines.append(LIKELIHOOD_NOTE)
        lines.append(front_table(self.front, self.references, reference_ms=self.reference_ms,
                                 accuracy=self.accuracy_column(), objectives=self.stored.objectives))
        lines += self.prompts_lines()
        line = undecided_line(self.undecided, budget, self.judge)
        if line:
            lines.append(line)
        if self.certified:
            assert self.stored.certification is not None  # the certified rows come of it
            confidence = self.stored.certification["confidence"]
            lines.append(f"certified on fresh items (no trial scored them; drop's interval at {level(confidence)}%, "
                         "valid at every planned look):")
            lines.append(verdict_table(self.certified, reference_ms=self.reference_ms,
                                       accuracy=self.accuracy_column(certified=True),
                                       record=self.stored.certification, objectives=self.stored.objectives))
        lines.append(self.verdict_line())
        lines += [f"  {line}" for line in self.cost_lines()]
        noisy = [t.number for t in measured if t.noisy]
        if noisy:
            lines.append(f"noisy trials (a null check failed; left off the front, measured again): {noisy}")
        checks = self.stored.null_checks
        for check in checks[-3:] if checks and checks[-1]["when"] == "end, after re-timing" else checks[-2:]:
            verdict = "TOO NOISY" if check["noisy"] else "ok"
            lines.append(f"A/A check at {check['when']}: {check['speedup']:.3f} [{check['lo']:.3f}, {check['hi']:.3f}]"
                         f", {check['pairs']} pairs, load {check['load_start']}: {verdict}")
        if self.baselines:
            lines.append(f"baselines ({len(self.baselines)} stored; `poptune leaderboard` tabulates them):")
            lines += [f"  {t.method:<13} ratio {t.details['ratio']:.3f}  {t.speedup:.3f}x  "
                      f"accuracy {100 * t.accuracy_mean:.2f}%  drop {t.drop_points:+.2f}" for t in self.baselines]
        return "\n".join(lines)

    def _workload_lines(self) -> list[str]:
        problem = self.stored.problem
        tasks = ", ".join(f"`{t}` ({_TASKS[t]})" if t in _TASKS else f"`{t}`" for t in problem.get("tasks", []))
        points = ", ".join(f"{n} tokens ({100 * w:.0f}%)" for n, w in self.stored.latency_points)
        return [f"- workload: {tasks}; items raced from {problem.get('items_start')} to {problem.get('limit')} per "
                f"task in a fixed order; time to first token timed at {points or problem.get('lengths')} of the "
                "scored prompts",
                f"- timing: interleaved POP/full pairs, at least {problem.get('repeats')}, until +-"
                f"{100 * (problem.get('precision') or 0):.0f}% or {problem.get('max_pairs')} pairs / "
                f"{problem.get('max_seconds')} s per length"]

    def _kv_lines(self) -> list[str]:
        """What each K/V source says of what the study prepared for it (calibrated K/V: the text its maps were
        fitted on, and per block what the fit's held-out check decided; nothing where it was not measured)."""
        details = [trial.details or {} for trial in self.trials]
        return [line for source in kv_registry.SOURCES for line in source.report_lines(details)]

    def markdown(self, plot: str | None = None) -> str:
        """The summary: what the study measured and for how long, its verdict and front, the null checks (and
        the plot's file name ``plot``, shown beside)."""
        stored, budget = self.stored, self.budget
        lines = [f"# Study {self.name}", "",
                 f"- model: {stored.model} (weights {str(stored.weights_fingerprint or '')[:24]}), "
                 f"{stored.num_layers} layers" + (f", {dtype}" if (dtype := stored.problem.get("dtype")) else "")
                 + f"; hardware: {stored.hardware_id}",
                 *self._workload_lines(), *self._kv_lines(),
                 f"- {self.judge} budget: " + (f"drop's upper bound <= {budget:g} points, certified on fresh items "
                                          f"(at most {100 * ERROR:g}% error over all the study's certifications; "
                                          "score test over a planned group-sequential design, see "
                                          "docs/statistics.md)"
                                          if budget is not None else "none")
                 + (f"; {LIKELIHOOD_NOTE}" if self.judge == LIKELIHOOD_JUDGE else ""),
                 f"- {len(self.measured)} configurations measured ({len(self.trials)} completed trials with answers "
                 "from storage and re-measures)"]
        for i, run in enumerate(stored.runs, 1):
            argv = run.get("command") or []
            command = typed_command(argv, program=None) if argv else "not recorded"  # no path of the machine
            lines.append(f"- run {i}: {_duration(run)}; `{command}`; load {run.get('load_start')} -> "
                         f"{run.get('load_end')}")
        if stored.state_reuse_check is not None:
            lines.append("- state reuse check: max abs logit difference "
                         f"{stored.state_reuse_check['max_abs_logit_diff']:.1e}")
        reference = self.reference_ms
        lines += ["", "## Verdict: the front's candidates certified on fresh items", "", self.verdict_line(), "",
                  *([f"- {line}" for line in self.cost_lines()] + [""] if self.cost_lines() else []),
                  *([verdict_table(self.certified, reference_ms=reference, markdown=True,
                                   accuracy=self.accuracy_column(certified=True), record=self.stored.certification,
                                   objectives=stored.objectives), ""] if self.certified else []),
                  "## Search front (not a verdict: drops on the items that selected them)", "",
                  front_table(self.front, self.references, reference_ms=reference, markdown=True,
                              accuracy=self.accuracy_column(), objectives=stored.objectives), "",
                  *([*(("  - " if line.startswith("    ") else "- ") + line.strip() for line in prompts), ""]
                    if (prompts := self.prompts_lines()) else []),
                  *([f"- {line}", ""] if (line := undecided_line(self.undecided, budget, self.judge)) else []),
                  f"- {_order_line(self.spot_checks)}", "",
                  "## Null checks (full model against itself)", ""]
        for check in stored.null_checks:
            lines.append(f"- A/A at {check['when']} ({check['date']}): {check['speedup']:.3f} [{check['lo']:.3f}, "
                         f"{check['hi']:.3f}], {check['pairs']} pairs: {'TOO NOISY' if check['noisy'] else 'ok'}")
        if plot:
            lines += ["", f"![speedup vs accuracy]({plot})"]
        return "\n".join(lines)

    def plot(self, path: str | Path) -> Path:
        """The plot: every trial, the front (error bars, step line), the references, the budget, and each
        certified candidate at the full model's accuracy minus its certified bound (not its search figures)."""
        from poptune.plots import pareto_plot

        objectives = self.stored.objectives
        points = [(t.speedup, 100 * named(objectives, t.values).get(ACCURACY.name, t.objective_accuracy), "")
                  for t in self.trials]
        marked = {r.name if r.row.skip == 0 else f"{r.name} ({_label(r.row)})": replace(_plot_point(r.row), label="")
                  for r in self.references if r.row is not None}  # named in the legend, not labelled beside the point
        budget, limit, full = None, self.budget, self.references[0].row
        ylabel, said = certreport.plot_labels(limit, self.judge)  # what the y axis is, by the study's judge
        if limit is not None and full is not None:
            budget = (100 * full.accuracy - limit, said)
            marked.update(certreport.bound_points(self.certified, self.stored.certification, 100 * full.accuracy))
        title = f"{self.name}: POP configurations (skip/boundary/offset)"
        if objectives != DEFAULT:  # the front is on more (or other) objectives than the axes show
            title += f"\nfront on {', '.join(objectives)}; beside each point: " + ", ".join(
                get(n).label for n in objectives if n not in DEFAULT)
        return pareto_plot(points, [_plot_point(r, objectives) for r in self.front], path, references=marked,
                           budget=budget, title=title, ylabel=ylabel)

    def write(self, folder: str | Path, storage: str | None = None) -> tuple[Path, Path]:
        """Write ``<storage>.<study>.pareto.png`` and ``<storage>.<study>.md`` (which shows the plot, and ends
        with a line naming the study and its storage) in ``folder``; returns both. Never replaces another
        study's report (:func:`poptune.reports.naming.report_paths`)."""
        md, png = report_paths(folder, storage, self.name)
        png = self.plot(png)
        write_text(str(md), self.markdown(plot=png.name) + "\n\n" + owner_line(storage, self.name))
        return md, png
