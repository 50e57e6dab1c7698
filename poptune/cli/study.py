"""``poptune study`` / ``pareto`` / ``export`` / ``envs``: search, show and deploy configurations."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from poptune.baselines.methods import METHODS
from poptune.errors import ConfigError

from ._args import add_calibration, add_model, add_preset, add_problem, calibration_spec, check_output_path, method_list
from ._args import preset_of
from ._args import problem as problem_of, write_text


def register(sub: Any) -> None:
    parser = sub.add_parser("study", help="search POP configurations for this model on this machine (Optuna)")
    add_model(parser)
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--trials", type=int, help="the study's total of measured configurations (default: the "
                        "preset's; standard: 12): the same command run again finishes at once, and workers sharing "
                        "a study stop together once it holds this many")
    budget.add_argument("--max-trials", type=int, dest="trials", help=argparse.SUPPRESS)  # its former name
    budget.add_argument("--add", type=int, help="measure this many configurations more than the study holds")
    parser.add_argument("--gpus", help="start one worker process per GPU of this host (e.g. 0,1,2,3), each pinned "
                        "with CUDA_VISIBLE_DEVICES; needs --storage journal:PATH or a database server")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # started by --gpus: no report
    parser.add_argument("--timeout", type=float, help="stop starting trials after this many seconds")
    add_preset(parser)
    add_problem(parser)
    parser.add_argument("--sampler", choices=("tpe", "nsga2", "random", "grid"), default="tpe")
    parser.add_argument("--storage", help="storage URL: sqlite:///PATH (default: sqlite:///studies/poptune.db; one "
                        "worker), journal:PATH (several processes on one host), postgresql://USER@HOST/DB (several "
                        "machines)")
    parser.add_argument("--study", help="study name (default: <model>@<hardware-id>)")
    parser.add_argument("--heartbeat", type=int, default=30, help="seconds between trial heartbeats (default: 30)")
    parser.add_argument("--init-from-importance", metavar="JSON",
                        help="enqueue the block the importance analysis proposes (poptune importance)")
    parser.add_argument("--init-ratio", type=float, default=1 / 3,
                        help="pruning ratio of that proposal (default: 1/3)")
    parser.add_argument("--no-confirm", action="store_true",
                        help="skip the A/A checks, the re-measures of noisy trials and the confirmation pass")
    parser.add_argument("--enqueue", metavar="SKIP/BOUNDARY/OFFSET,...",
                        help="configurations to measure first, after the full model and the paper's rule, "
                             "e.g. 9/window-4/0,6/window-4/0")
    parser.add_argument("--baselines", help="after the search, measure these baselines at the ratios of POP's "
                        f"front: comma-separated of {', '.join(METHODS)}, or all (with --trials 0: only that)")
    parser.add_argument("--baseline-ratios", help="comma-separated ratios in (0, 1) for --baselines (default: those "
                        "of POP's front and the paper's rule, skip / L)")
    add_calibration(parser)
    parser.set_defaults(run=run_study)

    pareto = sub.add_parser("pareto", help="print a stored Pareto front")
    pareto.add_argument("--study", help="study name (default: the storage's only study)")
    pareto.add_argument("--storage", help="storage URL (default: sqlite:///studies/poptune.db)")
    pareto.add_argument("--json", action="store_true", help="print JSON instead of a table")
    pareto.set_defaults(run=run_pareto)

    export = sub.add_parser("export", help="write the fastest stored configuration within an accuracy budget")
    export.add_argument("--model", help="check that the study is of this model")
    export.add_argument("--study", help="study name (default: the storage's only study)")
    export.add_argument("--storage", help="storage URL (default: sqlite:///studies/poptune.db)")
    export.add_argument("--max-drop", type=float, required=True, help="accuracy budget in points")
    export.add_argument("--out", help="output JSON path (default: print)")
    export.set_defaults(run=run_export)

    envs = sub.add_parser("envs", help="list the Gymnasium environment ids")
    envs.set_defaults(run=run_envs)


def _report_folder(storage: str | None) -> Path:
    """Where a study's summary and plot go: beside its SQLite or journal file, else ``studies/``."""
    from poptune.store.studies import DEFAULT_STORAGE

    url = storage or DEFAULT_STORAGE
    if url.startswith("sqlite:///"):
        return Path(url.removeprefix("sqlite:///").split("?", 1)[0]).parent
    if url.startswith("journal:"):
        return Path(url.removeprefix("journal:")).parent
    return Path("studies")


def _enqueued(text: str | None) -> tuple[Any, ...]:
    from poptune.engine import PopConfig

    configs = []
    for part in (p.strip() for p in (text or "").split(",") if p.strip()):
        fields = part.split("/")
        try:
            skip, boundary, offset = int(fields[0]), fields[1], int(fields[2])
        except (IndexError, ValueError) as e:
            raise ConfigError(f"`--enqueue` takes SKIP/BOUNDARY/OFFSET items, got {part!r}") from e
        configs.append(PopConfig(skip=skip, boundary=boundary, offset=offset))
    return tuple(configs)


def _ratios(text: str | None) -> tuple[float, ...] | None:
    if not text:
        return None
    try:
        ratios = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError as e:
        raise ConfigError(f"`--baseline-ratios` must be comma-separated numbers, got {text!r}") from e
    bad = [r for r in ratios if not 0 < r < 1]
    if bad or not ratios:
        raise ConfigError(f"`--baseline-ratios` must be in (0, 1), got {text!r}")
    return ratios


def _importance_proposal(args: argparse.Namespace) -> tuple[Any, ...]:
    if not args.init_from_importance:
        return ()
    from poptune.importance import load_importance, propose_block
    from poptune.models import resolve_model

    result = load_importance(args.init_from_importance)
    if resolve_model(result.model).name != resolve_model(args.model).name:
        raise ConfigError(f"{args.init_from_importance} analyses {result.model!r}, not {args.model!r}")
    return (propose_block(result.prefill, args.init_ratio),)


def _spec(args: argparse.Namespace, problem: Any) -> Any:
    from poptune.tune.study import StudySpec

    return StudySpec(problem=problem, trials=preset_of(args).trials, add=args.add, timeout=args.timeout,
                     sampler=args.sampler, storage=args.storage, study=args.study, seed=args.seed,
                     heartbeat_s=args.heartbeat, enqueue=_enqueued(args.enqueue) + _importance_proposal(args),
                     baselines=method_list(args.baselines), calibration=calibration_spec(args),
                     baseline_ratios=_ratios(args.baseline_ratios), confirm=not args.no_confirm)


class _Bars:
    """A study's progress (:class:`poptune.progress.Listener`): one bar of measured configurations, whose ETA
    counts measured trials only, and one bar of the phase at work (the full model's reference, a trial's
    latency pairs and accuracy rounds, the checks), with its items or pairs so far."""

    def __init__(self, disable: bool) -> None:
        self.disable = disable
        self.trials: Any = None
        self.phase: Any = None
        self.stack: list[list[Any]] = []
        self.seconds: list[float] = []
        self.opened = False  # stays so when the study held its trials already (nothing measured)

    def open(self, done: int, budget: int) -> None:
        from tqdm import tqdm

        self.opened = True
        if self.disable:  # a worker started by --gpus: no bars
            return
        self.trials = tqdm(total=budget, initial=min(done, budget), desc="configurations measured", position=0,
                           bar_format="{desc}: {n_fmt}/{total_fmt} |{bar:16}| {elapsed}{postfix}")
        self.phase = tqdm(total=None, position=1, leave=False,
                          bar_format="  {desc}: {n_fmt}/{total_fmt} {unit} [{elapsed}]")

    def write(self, line: str) -> None:
        (self.trials.write if self.trials is not None else print)(line)

    def measured(self, seconds: float, best: str) -> None:
        """A measured trial finished: count it, and say the ETA from measured trials' mean duration."""
        self.seconds.append(seconds)
        if self.trials is None:
            return
        self.trials.update(1)
        left = self.trials.total - self.trials.n
        mean = sum(self.seconds) / len(self.seconds)
        eta = f"ETA {_minutes(mean * left)} ({_minutes(mean)} per measured trial)" if left > 0 else ""
        self.trials.set_postfix_str(", ".join(part for part in (best, eta) if part), refresh=True)

    def start(self, label: str, unit: str, total: int | None) -> None:
        self.stack.append([label, unit, total, 0])
        self._show(restart=True)

    def expect(self, count: int) -> None:
        if self.stack:
            self.stack[-1][2] = (self.stack[-1][2] or 0) + count
            self._show()

    def advance(self, count: int) -> None:
        if self.stack:
            self.stack[-1][3] += count
            if self.phase is not None:
                self.phase.update(count)

    def end(self) -> None:
        if self.stack:
            self.stack.pop()
        self._show()

    def _show(self, restart: bool = False) -> None:
        """The phase bar shows the innermost open phase, under its parents' labels."""
        if self.phase is None:
            return
        _, unit, total, done = self.stack[-1] if self.stack else ("", "step", None, 0)
        if restart:
            self.phase.start_t = time.time()  # elapsed counts from the phase's start (tqdm's clock)
        self.phase.total, self.phase.n, self.phase.unit = total, done, unit + "s" if unit else ""
        self.phase.set_description_str(" > ".join(entry[0] for entry in self.stack) or "between phases", refresh=False)
        self.phase.refresh()

    def close(self) -> None:
        for bar in (self.phase, self.trials):
            if bar is not None:
                bar.close()
        self.phase = self.trials = None


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {int(seconds % 60):02d} s" if seconds >= 60 else f"{seconds:.0f} s"


def run_study(args: argparse.Namespace) -> int:
    if args.gpus is not None:
        return _run_workers(args)
    spec = _spec(args, problem_of(args))

    import optuna

    from poptune import progress, store
    from poptune.models import resolve_model
    from poptune.tune.study import run_study as run

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    resolve_model(spec.problem.model)  # bad input fails before the model loads and the storage
    store.check_storage(spec.storage)
    bars = _Bars(disable=args.worker)

    def finished(study: Any, trial: Any) -> None:
        if trial.state != optuna.trial.TrialState.COMPLETE:
            return
        bars.write(trial_line(trial))
        if {"reused_from", "remeasure_of"} & set(trial.user_attrs):
            return  # the bar and its ETA count measured configurations, as the budget does
        rows = [r for r in store.front(study) if r.skip]
        best = max(rows, key=lambda r: r.speedup, default=None)
        label = f"fastest on the front {best.speedup:.2f}x ({best.skip}/{best.boundary}/{best.offset})" if best else ""
        seconds = (trial.datetime_complete - trial.datetime_start).total_seconds()
        bars.measured(seconds, label)

    from poptune.tune.interrupt import interruptible

    try:
        with interruptible(), progress.listening(bars):  # a signal in the report too ends with the summary line
            study = run(spec, callbacks=[finished], started=bars.open)
            bars.close()
            if not args.worker:
                _report(study, spec, complete_already=not bars.opened)
    except KeyboardInterrupt as e:  # SIGINT or SIGTERM: the running trial is failed already
        bars.close()
        return _interrupted(e, spec)
    finally:
        bars.close()
    return 0


def trial_line(trial: Any) -> str:
    """One line per finished trial: configuration, speedup and drop with their intervals, items, reused or not."""
    a = trial.user_attrs
    c = a["config"]
    ci = a.get("speedup_ci")
    speed = f"{a['speedup']:.2f}x" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")
    d = a.get("drop")
    drop = f"{a['drop_points']:+.2f}" + (f" [{d['lo']:+.2f}, {d['hi']:+.2f}]" if d else "")
    items = sum((a.get("items") or {}).values())
    how = f"reused from trial {a['reused_from']}" if "reused_from" in a else "measured"
    seconds = (trial.datetime_complete - trial.datetime_start).total_seconds() if trial.datetime_start else 0.0
    return (f"trial {trial.number:>3}: skip {c['skip']:>2} {c['boundary']:<9} offset {c['offset']}  "
            f"speedup {speed}  drop {drop} pts  {items} items  {how} ({seconds:.0f} s)")


def _interrupted(error: BaseException, spec: Any) -> int:
    """The one summary line of an interrupted study, and the shell's exit status (130 SIGINT, 143 SIGTERM)."""
    import sys

    from poptune import store
    from poptune.tune.interrupt import exit_code

    try:
        stored = sum(len(store.completed(s, method=None)) for s in _studies(spec))
    except Exception:  # the storage itself may be what failed; the summary still comes
        stored = "no"
    print(f"interrupted: {stored} trials stored in {store.public_url(spec.storage)}; run the same command to "
          "resume", file=sys.stderr)
    return exit_code(error)


def _studies(spec: Any) -> list[Any]:
    import optuna

    from poptune import store

    try:
        storage = store.open_reader(spec.storage)
    except ConfigError:
        return []  # interrupted before the database was made
    from poptune.tune.study import study_name_of

    name = study_name_of(spec)
    return [optuna.load_study(study_name=name, storage=storage)] if name in store.study_names(storage) else []


def _report(study: Any, spec: Any, *, complete_already: bool) -> None:
    """The study's closing report: what it holds, the front with the reference rows, the null checks, and the
    summary and plot written beside its storage."""
    from poptune import report, store

    trials = store.completed(study)
    measured = [t for t in trials if not {"reused_from", "remeasure_of"} & set(t.user_attrs)]
    if complete_already:
        print(f"study {study.study_name} holds its {len(measured)} measured configurations (--trials {spec.trials}): "
              "nothing to measure; `--add N` measures N more")
    budget = study.user_attrs.get("problem", {}).get("max_drop")
    print(f"study {study.study_name}: {len(measured)} measured configurations ({len(trials)} completed trials with "
          "answers from storage and re-measures); Pareto front"
          + (f" within the budget (drop's 95% upper bound <= {budget:g} points):" if budget is not None else ":"))
    rows = store.front(study)
    print(report.front_table(rows, report.references(study, rows),
                             reference_ms=study.user_attrs.get("reference_prefill_ms")))
    line = report.undecided_line(report.undecided(study), study.user_attrs.get("problem", {}).get("max_drop"))
    if line:
        print(line)
    noisy = [t.number for t in measured if t.user_attrs.get("noisy")]
    if noisy:
        print(f"noisy trials (a null check failed; left off the front, measured again): {noisy}")
    for check in study.user_attrs.get("null_checks", [])[-2:]:
        verdict = "TOO NOISY" if check["noisy"] else "ok"
        print(f"A/A check at {check['when']}: {check['speedup']:.3f} [{check['lo']:.3f}, {check['hi']:.3f}], "
              f"{check['pairs']} pairs, load {check['load_start']}: {verdict}")
    baselines = [t for t in store.completed(study, method=None) if t.user_attrs.get("method", "pop") != "pop"]
    if baselines:
        print(f"baselines ({len(baselines)} stored; `poptune leaderboard` tabulates them):")
        for t in baselines:
            a = t.user_attrs
            print(f"  {a['method']:<13} ratio {a['details']['ratio']:.3f}  {a['speedup']:.3f}x  "
                  f"accuracy {100 * a['accuracy_mean']:.2f}%  drop {a['drop_points']:+.2f}")
    summary, plot = report.write_report(study, _report_folder(spec.storage))
    print(f"summary: {summary}\nplot: {plot}")


#: Options a ``--gpus`` parent sets itself for each worker (dropped from the command line it hands on).
_PARENT_OPTIONS = ("--gpus", "--trials", "--max-trials", "--add", "--device")


def _worker_argv(argv: list[str], budget: int) -> tuple[str, ...]:
    import sys

    kept, skip_value = [], False
    for token in argv[1:]:  # argv[0] is "study"
        if skip_value:
            skip_value = False
            continue
        name = token.split("=", 1)[0]
        if name in _PARENT_OPTIONS:
            skip_value = "=" not in token
            continue
        kept.append(token)
    return (sys.executable, "-m", "poptune", "study", *kept, "--device", "cuda", "--trials", str(budget), "--worker")


def _run_workers(args: argparse.Namespace) -> int:
    """``--gpus``: one worker process per GPU, each with the same budget of completed trials per study."""
    from dataclasses import replace

    import optuna

    from poptune import store
    from poptune.measure.hardware import fingerprint
    from poptune.models import resolve_model
    from poptune.tune.workers import WorkerCommand, check_gpus, parse_gpus, supervise

    gpus = parse_gpus(args.gpus)
    if not store.is_server(args.storage):
        raise ConfigError("`--gpus` starts several worker processes and SQLite is for one: use --storage "
                          "journal:PATH (this host) or postgresql://... (several machines)")
    if args.baselines:
        raise ConfigError("`--baselines` with `--gpus` would measure them in every worker: run the workers, then "
                          "`poptune study ... --trials 0 --baselines ...` once")
    spec = _spec(args, problem_of(args))  # a bad --trials or --add: one line, before any worker
    check_gpus(gpus)
    study_problem = replace(problem_of(args), device="cuda")
    storage = store.open_storage(args.storage, heartbeat=None)
    model = resolve_model(study_problem.model).name
    names = {g: args.study or store.study_name(model, fingerprint(f"cuda:{g}").hardware_id) for g in gpus}
    budgets: dict[str, int] = {}
    for name in set(names.values()):  # one study per GPU kind, each to --trials (or grown by --add)
        done = 0
        if name in store.study_names(storage):
            done = len(store.completed(optuna.load_study(study_name=name, storage=storage)))
        budgets[name] = done + spec.add if spec.add is not None else spec.trials
    workers = [WorkerCommand(_worker_argv(args.argv, budgets[names[g]]), g) for g in gpus]
    print(f"poptune: {len(workers)} workers on GPUs {args.gpus}, study {', '.join(sorted(budgets))}")
    code = supervise(workers)
    if code:
        return code
    for name in sorted(budgets):
        _report(store.load_study(storage, name), spec, complete_already=False)
    return 0


def run_pareto(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from poptune import report, store

    study = store.load_study(store.open_reader(args.storage), args.study)
    rows = store.front(study)
    refs = report.references(study, rows)
    if args.json:
        print(json.dumps({"study": study.study_name, "front": [asdict(r) for r in rows],
                          "references": [{"name": r.name, "status": r.status, "row": asdict(r.row) if r.row else None}
                                         for r in refs]}, indent=2))
    else:
        budget = study.user_attrs.get("problem", {}).get("max_drop")
        print(f"study {study.study_name}: Pareto front"
              + (f" within the budget (drop's 95% upper bound <= {budget:g} points)" if budget is not None else ""))
        print(report.front_table(rows, refs, reference_ms=study.user_attrs.get("reference_prefill_ms")))
    return 0


def run_export(args: argparse.Namespace) -> int:
    from poptune.export import export_config

    if args.out:
        check_output_path(args.out)
    data = export_config(args.storage, args.study, max_drop=args.max_drop, model=args.model)
    text = json.dumps(data, indent=2)
    if args.out:
        write_text(args.out, text)
        cfg, obj = data["pop_config"], data["objectives"]
        interval = f" [{obj['speedup_lo']:.2f}, {obj['speedup_hi']:.2f}]" if obj.get("speedup_lo") else ""
        print(f"wrote {args.out}: skip={cfg['skip']} boundary={cfg['boundary']} offset={cfg['offset']}, "
              f"{obj['speedup']:.2f}x{interval} prefill, drop {obj['drop_points']:+.2f} points on {data['hardware']['hardware_id']}")
    else:
        print(text)
    return 0


def run_envs(args: argparse.Namespace) -> int:
    from poptune.env import env_ids

    for env_id in env_ids():
        print(env_id)
    return 0
