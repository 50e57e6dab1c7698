"""``poptune study``: search POP configurations for this model on this machine, and report the study."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from poptune.baselines.methods import METHODS
from poptune.cli._args import (
    PAPER_RATIO,
    add_calibration,
    add_model,
    add_preset,
    add_problem,
    add_storage,
    calibration_spec,
    comma_list,
    config_list,
    count,
    default_of,
    finite,
    items,
    method_list,
    positive,
    preset_of,
    ratio_list,
)
from poptune.cli._args import problem as problem_of
from poptune.cli._bars import Bars
from poptune.cli._runtime import add_runtime
from poptune.errors import ConfigError
from poptune.kv import registry as kv_registry
from poptune.objectives import registry as objectives
from poptune.problem.problem import TuningProblem
from poptune.store.studies import HEARTBEAT_S
from poptune.tune.samplers import DEFAULT_SAMPLER, SAMPLERS


def register(sub: Any) -> None:
    parser = sub.add_parser("study", help="search POP configurations for this model on this machine (Optuna)")
    add_model(parser)
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--trials", type=count, help="the study's total of measured configurations (default: the "
                        "preset's; standard: 12): the same command run again finishes at once, and workers sharing "
                        "a study stop together once it holds this many")
    budget.add_argument("--max-trials", type=count, dest="trials", help=argparse.SUPPRESS)  # its former name
    budget.add_argument("--add", type=count, help="measure this many configurations more than the study holds")
    parser.add_argument("--gpus", type=comma_list,
                        help="start one worker process per GPU of this host (e.g. 0,1,2,3), each pinned "
                        "with CUDA_VISIBLE_DEVICES; needs --storage journal:PATH or a database server")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # started by --gpus: no report
    parser.add_argument("--timeout", type=finite, help="stop starting trials after this many seconds")
    add_preset(parser)
    add_problem(parser)
    names = default_of(TuningProblem, "objectives")
    parser.add_argument("--objectives", type=comma_list, default=names, metavar="NAMES",
                        help=f"the study's objectives, comma-separated (default: {','.join(names)}); "
                        "stored with the study, so a resumed one keeps them: "
                        + "; ".join(f"{o.name} ({o.direction}), {o.about}" for o in objectives.OBJECTIVES.values()))
    parser.add_argument("--time-budget", type=_minutes, default=TIME_BUDGET_MIN, metavar="MINUTES",
                        help=f"minutes the run may take from its start to its verdict (default: {TIME_BUDGET_MIN:g}; "
                        "`none`: no clock): without --certify the certification is sized to decide (the items a "
                        "verdict needs at the flip rate the search saw) within what is left of it, and says so "
                        "before it spends")
    parser.add_argument("--forget-answers", action="store_true",
                        help="clear the full model's remembered answers beside the storage file (full-answers.sqlite) "
                        "before the study: every item's reference is then scored again")
    parser.add_argument("--sampler", choices=SAMPLERS, default=DEFAULT_SAMPLER)
    parser.add_argument("--batch", type=positive, default=1, metavar="TRIALS",
                        help="trials asked of the sampler at once, their accuracy raced together: each batch of "
                        "items is scored in one pass for all of them, the same measurements (default: 1; the "
                        "structured sampler batches once its front holds a candidate; a GPU's decode steps cost "
                        "about the same for many rows as for few)")
    add_storage(parser, study="<model>@<hardware-id>")
    parser.add_argument("--heartbeat", type=positive, default=HEARTBEAT_S,
                        help=f"seconds between trial heartbeats (default: {HEARTBEAT_S})")
    parser.add_argument("--init-from-importance", metavar="JSON",
                        help="enqueue the block the importance analysis proposes (poptune importance)")
    parser.add_argument("--init-ratio", type=finite, default=PAPER_RATIO,
                        help="pruning ratio of that proposal (default: 1/3, the paper's)")
    parser.add_argument("--no-confirm", action="store_true",
                        help="skip the A/A checks, the re-measures of noisy trials and the confirmation pass")
    parser.add_argument("--enqueue", metavar="SKIP/BOUNDARY/OFFSET[/KV],...", type=comma_list,
                        help="configurations to measure first, after the full model and the paper's rule, "
                             f"e.g. 9/window-4/0,6/window-4/0/{kv_registry.NAMES[1]} (KV: one of "
                             f"{', '.join(kv_registry.NAMES)}, default {kv_registry.DEFAULT}; a source the search "
                             "does not search needs it in --kv)")
    parser.add_argument("--baselines", type=comma_list,
                        help="after the search, measure these baselines at the ratios of POP's "
                        f"front: comma-separated of {', '.join(METHODS)}, or all (with --trials 0: only that)")
    parser.add_argument("--baseline-ratios", type=comma_list,
                        help="comma-separated ratios in (0, 1) for --baselines (default: those "
                        "of POP's front and the paper's rule, skip / L)")
    add_calibration(parser)
    add_runtime(parser, "the embedded generation tasks; the verdict names it")
    parser.set_defaults(run=run_study)


#: The default ``--time-budget``: the embedded default study ends with its verdict within 20 minutes on a
#: 2-core CPU (the closing A/A check and report fit in what it keeps, :data:`poptune.tune.certify.CLOSING_S`).
TIME_BUDGET_MIN = 19.0


#: ``--time-budget``'s range in minutes: under one a study cannot time one configuration beside the full model
#: (0.001 used to be taken, the certification then run regardless); past a week is a typo (1e308 overflowed).
TIME_BUDGET_RANGE = (1.0, 7 * 24 * 60.0)


def _minutes(text: str) -> float | None:
    """``--time-budget``: minutes within :data:`TIME_BUDGET_RANGE`, or ``none``."""
    if text.strip().lower() == "none":
        return None
    value = finite(text)
    low, high = TIME_BUDGET_RANGE
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(f"must be minutes in [{low:g}, {high:g}] or `none`, got {text!r}")
    return value


def _enqueued(value: Any) -> tuple[Any, ...]:
    return config_list(value, "--enqueue")


def _ratios(value: Any) -> tuple[float, ...] | None:
    return ratio_list(value, "--baseline-ratios") if items(value) else None


def _importance_proposal(args: argparse.Namespace) -> tuple[Any, ...]:
    if not args.init_from_importance:
        return ()
    from poptune.baselines.importance import load_importance, propose_block
    from poptune.models import resolve_model
    from poptune.models.registry import layer_count

    result = load_importance(args.init_from_importance)
    if resolve_model(result.model).name != resolve_model(args.model).name:
        raise ConfigError(f"{args.init_from_importance} analyses {result.model!r}, not {args.model!r}")
    layers = layer_count(args.model, args.weights)
    if layers is not None and layers != result.num_layers:
        raise ConfigError(f"{args.init_from_importance} holds {result.num_layers} layers' importance, and "
                          f"{args.model} has {layers} layers")
    return (propose_block(result.prefill, args.init_ratio),)


def _spec(args: argparse.Namespace, problem: Any) -> Any:
    from dataclasses import replace

    from poptune.tune.study import StudySpec

    problem = replace(problem, objectives=objectives.check(items(args.objectives)))  # unknown: one line, exit 2
    return StudySpec(problem=problem, trials=preset_of(args).trials, add=args.add, timeout=args.timeout,
                     sampler=args.sampler, storage=args.storage, study=args.study, seed=args.seed,
                     heartbeat_s=args.heartbeat, enqueue=_enqueued(args.enqueue) + _importance_proposal(args),
                     baselines=method_list(args.baselines), calibration=calibration_spec(args),
                     baseline_ratios=_ratios(args.baseline_ratios), confirm=not args.no_confirm,
                     time_budget=None if args.time_budget is None else 60 * args.time_budget,
                     plan_certification=args.certify is None, forget_answers=args.forget_answers,
                     batch=args.batch)


def run_study(args: argparse.Namespace) -> int:
    if args.gpus is not None:
        return _run_workers(args)
    spec = _spec(args, problem_of(args))

    import optuna

    from poptune import progress, store
    from poptune.tune.study import run_study as run
    from poptune.tune.study import target_of

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    target = target_of(spec)  # the model resolved once, here (unknown: one line before anything), and passed down
    bars = Bars(disable=args.worker)

    def finished(study: Any, trial: Any) -> None:
        if trial.state != optuna.trial.TrialState.COMPLETE:
            return
        stored = store.StoredTrial.of(trial)
        bars.write(trial_line(stored, spec.problem.objectives))
        if not stored.measured:
            return  # the bar and its ETA count measured configurations, as the budget does
        rows = [r for r in store.front(study) if r.skip]
        best = max(rows, key=lambda r: r.speedup, default=None)
        label = f"fastest on the front {best.speedup:.2f}x ({best.label})" if best else ""
        bars.measured(stored.seconds, label)

    from poptune.tune.interrupt import interruptible

    try:
        with interruptible(), progress.listening(bars):  # a signal in the report too ends with the summary line
            study = run(spec, callbacks=[finished], started=bars.open, target=target)
            bars.close()
            if not args.worker:
                _report(study, spec, complete_already=not bars.opened)
    except KeyboardInterrupt as e:  # SIGINT or SIGTERM: the running trial is failed already
        bars.close()
        return _interrupted(e, spec, target)
    finally:
        bars.close()
    return 0


def trial_line(trial: Any, names: Sequence[str] = objectives.DEFAULT) -> str:
    """One line per finished trial (a :class:`~poptune.store.StoredTrial`): configuration, speedup and drop with
    their intervals, items, the study's objectives beyond those two (``names``: K/V MiB, TPOT ms), reused or not."""
    c, ci, d = trial.config, trial.speedup_ci, trial.drop_ci
    speed = f"{trial.speedup:.2f}x" + (f" {ci.bracket('.2f')}" if ci else "")
    drop = f"{trial.drop_points:+.2f}" + (f" {d.bracket('+.2f')}" if d else "")
    how = f"reused from trial {trial.reused_from}" if trial.reused_from is not None else "measured"
    label = kv_registry.source(c.kv).label
    kv = f" {label}" if label else ""
    others = "".join(f"  {objectives.get(n).label} {objectives.get(n).cell(v)}"
                     for n, v in objectives.named(names, trial.values).items() if n not in objectives.DEFAULT)
    return (f"trial {trial.number:>3}: skip {c.skip:>2} {c.boundary:<9} offset {c.offset}{kv}  "
            f"speedup {speed}  drop {drop} pts{others}  {trial.items or 0} items  {how} ({trial.seconds:.0f} s)")


def _interrupted(error: BaseException, spec: Any, target: Any) -> int:
    """The one summary line of an interrupted study, and the shell's exit status (130 SIGINT, 143 SIGTERM)."""
    import sys

    from poptune import store
    from poptune.tune.interrupt import exit_code

    stored: int | str
    try:
        stored = sum(len(store.completed(s, method=None)) for s in _studies(spec, target))
    except Exception:  # noqa: BLE001 -- the storage itself may be what failed; the summary still comes
        stored = "no"
    print(f"interrupted: {stored} trials stored in {store.public_url(spec.storage)}; run the same command to "
          "resume", file=sys.stderr)
    return exit_code(error)


def _studies(spec: Any, target: Any) -> list[Any]:
    import optuna

    from poptune import store
    from poptune.tune.study import study_name_of

    try:
        storage = store.open_reader(spec.storage)
    except ConfigError:
        return []  # interrupted before the database was made
    name = study_name_of(spec, target)
    return [optuna.load_study(study_name=name, storage=storage)] if name in store.study_names(storage) else []


def _report(study: Any, spec: Any, *, complete_already: bool) -> None:
    """The study's closing report: what it holds, the front with the reference rows, the null checks, and the
    summary and plot written beside its storage (:class:`poptune.reports.study_report.StudyReport`, read once)."""
    from poptune.reports.study_report import StudyReport, default_folder

    built = StudyReport.of(study)
    print(built.text(asked=spec.trials if complete_already else None))
    summary, plot = built.write(default_folder(spec.storage), spec.storage)
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
    from poptune import store
    from poptune.tune.workers import WorkerCommand, check_gpus, parse_gpus, study_budgets, supervise

    gpus = parse_gpus(",".join(items(args.gpus)))
    if not store.is_server(args.storage):
        raise ConfigError("`--gpus` starts several worker processes and SQLite is for one: use --storage "
                          "journal:PATH (this host) or postgresql://... (several machines)")
    if args.baselines:
        raise ConfigError("`--baselines` with `--gpus` would measure them in every worker: run the workers, then "
                          "`poptune study ... --trials 0 --baselines ...` once")
    spec = _spec(args, problem_of(args))  # a bad --trials or --add: one line, before any worker
    check_gpus(gpus)
    storage = store.open_storage(args.storage, heartbeat=None)  # once: the budgets, then the reports
    names, budgets = study_budgets(storage, gpus, model=spec.problem.model, study=args.study, trials=spec.trials,
                                   add=spec.add)
    workers = [WorkerCommand(_worker_argv(args.argv, budgets[names[g]]), g) for g in gpus]
    print(f"poptune: {len(workers)} workers on GPUs {args.gpus}, study {', '.join(sorted(budgets))}")
    code = supervise(workers)
    if code:
        return code
    for name in sorted(budgets):
        _report(store.load_study(storage, name), spec, complete_already=False)
    return 0
