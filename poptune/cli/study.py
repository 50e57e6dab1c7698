"""``poptune study`` / ``pareto`` / ``export`` / ``envs``: search, show and deploy configurations."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from poptune.baselines.methods import METHODS
from poptune.errors import ConfigError
from poptune.files import safe_name

from ._args import add_calibration, add_model, add_problem, calibration_spec, check_output_path, method_list
from ._args import problem as problem_of, write_text


def register(sub: Any) -> None:
    parser = sub.add_parser("study", help="search POP configurations for this model on this machine (Optuna)")
    add_model(parser)
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--trials", type=int, help="measured configurations to add to the study now (default: 12)")
    budget.add_argument("--max-trials", type=int, help="instead, the study's total of completed trials: workers "
                        "sharing a study (several machines) stop together once it holds this many")
    parser.add_argument("--gpus", help="start one worker process per GPU of this host (e.g. 0,1,2,3), each pinned "
                        "with CUDA_VISIBLE_DEVICES; needs --storage journal:PATH or a database server")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # started by --gpus: no report
    parser.add_argument("--timeout", type=float, help="stop starting trials after this many seconds")
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


def _front_table(rows: list[Any]) -> str:
    lines = [f"{'trial':>5}  {'skip':>4}  {'boundary':<9}  {'offset':>6}  {'objective ms':>12}  {'speedup [95% CI]':>24}  "
             f"{'pairs':>5}  {'ideal':>6}  {'accuracy':>8}  {'drop [95% CI]':>22}  {'items':>5}"]
    for r in rows:
        interval = f"[{r.speedup_lo:.3f}, {r.speedup_hi:.3f}]" if r.speedup_lo is not None else "[no interval]"
        ideal = f"{r.ideal:>5.2f}x" if r.ideal is not None else f"{'':>6}"
        drop = f"{r.drop:+6.2f}" + (f" [{r.drop_lo:+6.2f}, {r.drop_hi:+6.2f}]" if r.drop_hi is not None else "")
        lines.append(f"{r.trial:>5}  {r.skip:>4}  {r.boundary:<9}  {r.offset:>6}  {r.prefill_ms:>12.1f}  "
                     f"{r.speedup:>6.3f}x {interval:>16}{'*' if r.confirmed else ' '}  {r.pairs or '':>5}  {ideal}  "
                     f"{100 * r.accuracy:>7.2f}%  {drop:>22}  {r.items or '':>5}")
    lines.append("objective ms: the study's reference full-model TTFT over the speedup; accuracy: the full model's "
                 "on the reference items minus the paired drop (points, full - POP)")
    if any(r.confirmed for r in rows):
        lines.append("*: figures of the confirmation pass (the front's configurations re-timed together)")
    return "\n".join(lines)


def _plot_path(storage: str | None, study_name: str) -> Path:
    from poptune.store import DEFAULT_STORAGE

    url = storage or DEFAULT_STORAGE
    folder = Path(url.removeprefix("sqlite:///")).parent if url.startswith("sqlite:///") else Path("studies")
    if url.startswith("journal:"):
        folder = Path(url.removeprefix("journal:")).parent
    return folder / f"{safe_name(study_name)}.pareto.png"


def write_front_plot(study: Any, path: Path) -> Path:
    from poptune import store
    from poptune.plots import pareto_plot

    label = lambda r: f"{r.skip}/{r.boundary}/{r.offset}"  # noqa: E731
    points = [(t.user_attrs["speedup"], 100 * t.values[1], "") for t in store.completed(study)]
    front = [(r.speedup, 100 * r.accuracy, label(r)) for r in store.front(study)]
    return pareto_plot(points, front, path, title=f"{study.study_name}: POP configurations (skip/boundary/offset)")


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
    from poptune.tune import StudySpec

    trials = 12 if args.trials is None else args.trials  # `--trials 0` only adds baselines, never the default
    return StudySpec(problem=problem, trials=trials, max_trials=args.max_trials, timeout=args.timeout,
                     sampler=args.sampler, storage=args.storage, study=args.study, seed=args.seed,
                     heartbeat_s=args.heartbeat, enqueue=_enqueued(args.enqueue) + _importance_proposal(args),
                     baselines=method_list(args.baselines), calibration=calibration_spec(args),
                     baseline_ratios=_ratios(args.baseline_ratios), confirm=not args.no_confirm)


def run_study(args: argparse.Namespace) -> int:
    if args.gpus is not None:
        return _run_workers(args)
    spec = _spec(args, problem_of(args))

    import optuna
    from tqdm import tqdm

    from poptune import store
    from poptune.tune import run_study as run

    from poptune.models import resolve_model

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    resolve_model(spec.problem.model)  # bad input fails before the model loads and the storage
    store.check_storage(spec.storage)
    # The bar opens once every check has passed (`started`), so that an error is the first line on stderr.
    bars: list[Any] = []

    def start() -> None:
        bars.append(tqdm(total=None if spec.max_trials else spec.trials, desc="study", unit="trial",
                         disable=args.worker))

    def progress(study: Any, trial: Any) -> None:
        if trial.state != optuna.trial.TrialState.COMPLETE:
            return
        bars[0].write(trial_line(trial))
        if "reused_from" in trial.user_attrs:
            return  # the bar counts measured configurations, as the budget does
        bars[0].update(1)
        rows = [r for r in store.front(study) if r.feasible]
        if rows:
            best = max(rows, key=lambda r: r.speedup if r.drop <= (spec.problem.max_drop or 1.0) else 0)
            bars[0].set_postfix_str(f"best {best.speedup:.2f}x at drop {best.drop:+.2f} ({best.skip}/{best.boundary})")

    from poptune.interrupt import interruptible

    try:
        with interruptible():  # the report too: a signal there still ends with the one summary line
            study = run(spec, callbacks=[progress], progress=lambda label: bars and bars[0].set_postfix_str(label),
                        started=start)
            for bar in bars:
                bar.close()
            if not args.worker:
                _report(study, spec.storage)
    except KeyboardInterrupt as e:  # SIGINT or SIGTERM: the running trial is failed already
        for bar in bars:
            bar.close()
        return _interrupted(e, spec)
    finally:
        for bar in bars:
            bar.close()
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
    from poptune.interrupt import exit_code

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
    from poptune.measure.hardware import fingerprint
    from poptune.models import resolve_model

    name = spec.study or store.study_name(resolve_model(spec.problem.model).name,
                                          fingerprint(spec.problem.device).hardware_id)
    return [optuna.load_study(study_name=name, storage=storage)] if name in store.study_names(storage) else []


def _report(study: Any, storage: str | None) -> None:
    from poptune import store

    trials = store.completed(study)
    measured = [t for t in trials if not {"reused_from", "remeasure_of"} & set(t.user_attrs)]
    noisy = [t.number for t in measured if t.user_attrs.get("noisy")]
    print(f"study {study.study_name}: {len(measured)} measured configurations ({len(trials)} completed trials with "
          "answers from storage and re-measures); Pareto front:")
    print(_front_table(store.front(study)))
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
    path = write_front_plot(study, _plot_path(storage, study.study_name))
    print(f"plot: {path}")


#: Options a ``--gpus`` parent sets itself for each worker (dropped from the command line it hands on).
_PARENT_OPTIONS = ("--gpus", "--trials", "--max-trials", "--device")


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
    return (sys.executable, "-m", "poptune", "study", *kept, "--device", "cuda", "--max-trials", str(budget),
            "--worker")


def _run_workers(args: argparse.Namespace) -> int:
    """``--gpus``: one worker process per GPU, each with the same budget of completed trials per study."""
    from dataclasses import replace

    import optuna

    from poptune import store
    from poptune.measure.hardware import fingerprint
    from poptune.models import resolve_model
    from poptune.workers import WorkerCommand, check_gpus, parse_gpus, supervise

    gpus = parse_gpus(args.gpus)
    if not store.is_server(args.storage):
        raise ConfigError("`--gpus` starts several worker processes and SQLite is for one: use --storage "
                          "journal:PATH (this host) or postgresql://... (several machines)")
    if args.baselines:
        raise ConfigError("`--baselines` with `--gpus` would measure them in every worker: run the workers, then "
                          "`poptune study ... --trials 0 --baselines ...` once")
    spec = _spec(args, problem_of(args))  # a bad --trials or --max-trials: one line, before any worker
    check_gpus(gpus)
    study_problem = replace(problem_of(args), device="cuda")
    storage = store.open_storage(args.storage, heartbeat=None)
    model = resolve_model(study_problem.model).name
    names = {g: args.study or store.study_name(model, fingerprint(f"cuda:{g}").hardware_id) for g in gpus}
    budgets: dict[str, int] = {}
    for name in set(names.values()):  # one study per GPU kind; each grows by --trials
        done = 0
        if name in store.study_names(storage):
            done = len(store.completed(optuna.load_study(study_name=name, storage=storage)))
        budgets[name] = args.max_trials if args.max_trials is not None else done + spec.trials
    workers = [WorkerCommand(_worker_argv(args.argv, budgets[names[g]]), g) for g in gpus]
    print(f"poptune: {len(workers)} workers on GPUs {args.gpus}, study {', '.join(sorted(budgets))}")
    code = supervise(workers)
    if code:
        return code
    for name in sorted(budgets):
        _report(store.load_study(storage, name), args.storage)
    return 0


def run_pareto(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from poptune import store

    study = store.load_study(store.open_reader(args.storage), args.study)
    rows = store.front(study)
    if args.json:
        print(json.dumps({"study": study.study_name, "front": [asdict(r) for r in rows]}, indent=2))
    else:
        print(f"study {study.study_name}: Pareto front")
        print(_front_table(rows))
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
