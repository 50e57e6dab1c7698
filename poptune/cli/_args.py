"""Arguments shared by several commands: groups of options (the model, a POP configuration, a study's problem,
its precision, calibration), built from the options table (:mod:`poptune.cli._options`), and the readers of
their values."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from poptune.boundary import registry as boundary_registry
from poptune.cli._checks import budget, count, finite, int_list, pairs_cap, positive
from poptune.cli._options import LibraryDefault, add_option, comma_list, default_of, items, resolve_defaults
from poptune.engine import PopConfig
from poptune.errors import ConfigError
from poptune.files import write_text
from poptune.kv import registry as kv_registry
from poptune.problem.presets import DEFAULT_PRESET, PRESETS, STANDARD, Preset
from poptune.problem.problem import DEFAULT_MAX_DROP, STUDY_TASKS, TuningProblem

#: The paper's pruning ratio (it skips the last third of the layers in prefill): the default of every ratio option.
PAPER_RATIO = 1 / 3


def add_output(parser: argparse.ArgumentParser, what: str) -> None:
    """``--json`` (print ``what`` as JSON on stdout instead of the table) and ``--out PATH`` (write it as JSON),
    the same in every command."""
    parser.add_argument("--json", nargs="?", const=True, default=False, action=_JsonFlag,
                        help=f"print {what} as JSON on stdout instead of the table")
    parser.add_argument("--out", metavar="PATH", help=f"write {what} as JSON to PATH")


class _JsonFlag(argparse.Action):
    """``--json`` takes no value; an old-style ``--json PATH`` is refused in one line naming ``--out``."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        if values is not True:
            parser.error(f"`--json` takes no file (it prints JSON on stdout): use `--out {values}` to write one")
        setattr(namespace, self.dest, True)


def emit(args: argparse.Namespace, table: str, data: str) -> None:
    """A command's result: ``data`` (JSON text) to ``--out`` if given; then the table, or ``data`` with ``--json``."""
    if args.out:
        write_text(args.out, data)
    print(data if args.json else table)
    if args.out and not args.json:
        print(f"wrote {args.out}")


def add_storage(parser: argparse.ArgumentParser, *, study: str | None = "the storage's only study") -> None:
    """``--storage URL`` and (unless ``study`` is None) ``--study NAME``, the same in every command."""
    parser.add_argument("--storage", metavar="URL", help="storage URL: sqlite:///PATH (default: "
                        "sqlite:///studies/poptune.db), journal:PATH (several processes on one host), "
                        "postgresql://USER@HOST/DB (several machines)")
    if study is not None:
        parser.add_argument("--study", metavar="NAME", type=_study_name, help=f"study name (default: {study})")


def _study_name(text: str) -> str:
    """``--study``: a name that can name the study's files (:func:`poptune.store.urls.check_study_name`)."""
    from poptune.store.urls import check_study_name

    try:
        return check_study_name(text) or text
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def add_model(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("model")
    for flag in ("--model", "--device", "--dtype", "--weights"):
        add_option(group, flag)


def add_pop(parser: argparse.ArgumentParser, *, skip_required: bool = True) -> None:
    group = parser.add_argument_group("POP configuration")
    group.add_argument("--skip", type=count, required=skip_required, help="layers skipped in prefill")
    group.add_argument("--boundary", default=default_of(PopConfig, "boundary"),
                       help=f"one of {', '.join(boundary_registry.NAMES)} (default: %(default)s)")
    group.add_argument("--offset", type=count, default=default_of(PopConfig, "offset"),
                       help="final layers kept even in prefill (default: %(default)s)")
    add_option(group, "--kv")  # one configuration: one source (pop_config)


def kv_sources(value: str | Iterable[str], *, one: bool = False) -> tuple[str, ...]:
    """``--kv``'s sources (each is checked by the spec that takes it: :class:`PopConfig`, :class:`TuningProblem`);
    with ``one`` (a single configuration) exactly one.

    Raises:
        ConfigError: with ``one``, none or more than one.
    """
    names = items(value)
    if one and len(names) != 1:
        raise ConfigError(f"`--kv` of one configuration names one K/V source (one of {', '.join(kv_registry.NAMES)})"
                          f", got {','.join(names)!r}; a study searches several")
    return names


def prepare_kv(model: Any, tokenizer: Any, config: PopConfig, args: argparse.Namespace,
               data_dir: Any = None) -> None:
    """:func:`poptune.kvfit.prepare.prepare_kv` for the command line's model (calibrated K/V: the block's maps, read
    from the cache, else fitted now on WikiText-2 validation text of ``data_dir``)."""
    from poptune.kvfit.fit import KVFitSpec
    from poptune.kvfit.prepare import prepare_kv as prepare
    from poptune.models import weights_fingerprint

    prepare(model, tokenizer, config, fingerprint=weights_fingerprint(args.model, args.weights),
            spec=KVFitSpec(data_dir=str(data_dir) if data_dir is not None else None))


def add_prefill_chunk(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prefill-chunk", type=count, metavar="N",
                        help="prefill prompts in chunks of N tokens, as serving engines do, POP and the full model "
                             "alike (default: whole prompts)")


def prefill_chunk(args: argparse.Namespace) -> int | None:
    """``--prefill-chunk``, validated."""
    from poptune.engine.segments import chunk_bounds

    chunk_bounds(2, args.prefill_chunk)
    return args.prefill_chunk


def pop_config(args: argparse.Namespace) -> PopConfig:
    (kv,) = kv_sources(args.kv, one=True)
    return PopConfig.from_fields(args.skip, args.boundary, args.offset, kv=kv, who="the command line")


def check_output_path(path: str) -> None:
    """Fail before any work if ``path`` cannot be written later (a folder, a missing or read-only folder)."""
    from poptune.files import check_writable_file

    check_writable_file(path)


def seed(text: str) -> int:
    """An argparse type: a seed NumPy and PyTorch both take, an integer in [0, 2**32 - 1]."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if not 0 <= value <= 2**32 - 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 2**32 - 1], got {value}")
    return value


def add_problem(parser: argparse.ArgumentParser) -> None:
    """What a study or a baseline measures: prompt lengths, tasks and their items, timing pairs."""
    lengths = ",".join(map(str, default_of(TuningProblem, "lengths")))
    parser.add_argument("--lengths", type=comma_list,
                        help=f"prompt lengths of the synthetic passkey items (default: {lengths}); "
                        "latency is timed at the lengths of the prompts the study scores, weighted by their share")
    parser.add_argument("--image", metavar="WxH", type=comma_list,
                        help="time an image prompt instead (a vision-language model): one image of this size and a "
                             "short question, e.g. 640x480; accuracy still comes from --tasks")
    parser.add_argument("--tasks", type=comma_list, help=f"accuracy tasks, comma-separated (default: "
                        f"{','.join(STUDY_TASKS)} with a data directory, else embedded)")
    parser.add_argument("--limit", type=count, help="items per task at most: accuracy is raced in rounds until the "
                        f"drop's interval is decided, up to this cap (default: the preset's; standard: "
                        f"{STANDARD.limit}, {STANDARD.long_limit} on the long-prompt pack)")
    parser.add_argument("--certify", type=count, default=None,
                        help="after the search, items per task at most on which the front's fastest candidates are "
                        f"certified on fresh items (default: planned by `study` to decide within --time-budget, up "
                        f"to the preset's most; standard: {STANDARD.plan}, {STANDARD.long_plan} on the long-prompt "
                        f"pack; elsewhere {STANDARD.certify} and {STANDARD.long_certify}; 0: no certification)")
    parser.add_argument("--items", type=positive, help="items per task in the first round (default: the preset's; "
                        f"standard: {STANDARD.items})")
    add_option(parser, "--data-dir")
    add_prompts(parser)
    parser.add_argument("--max-drop", type=budget, default=DEFAULT_MAX_DROP,
                        help=f"accuracy budget in points (default: {DEFAULT_MAX_DROP}; `none`: no budget): the search "
                        "rejects a configuration whose drop's 95%% lower end exceeds it (an Optuna constraint); the "
                        "front's fastest candidate is then certified within it, or not, on fresh items. With "
                        "--judge likelihood it bounds instead the paired drop, x100, of the mean probability of the "
                        "full model's answer tokens under the configuration's prefill (2: at most 0.02 lower), and "
                        "the verdict says so")
    parser.add_argument("--seed", type=seed, default=default_of(TuningProblem, "seed"))
    add_option(parser, "--kv", default=LibraryDefault("poptune.problem.problem:TuningProblem.kv"))  # searched
    add_precision(parser, repeats=default_of(TuningProblem, "repeats"), max_pairs=STANDARD.max_pairs,
                  max_seconds=STANDARD.max_seconds, stop="--repeats", preset=True,
                  precision=default_of(TuningProblem, "precision"))


def add_prompts(parser: argparse.ArgumentParser, *, store: bool = True, judge: bool | None = None) -> None:
    """``--prompts FILE`` (a user's own prompts, :mod:`poptune.evaluate.prompts`), ``--store-prompts`` (with
    ``store``) and ``--judge`` (with ``judge``, default ``store``: what a study's budget or an evaluation's
    drop is on)."""
    parser.add_argument("--prompts", metavar="FILE",
                        help="your own prompts instead of --tasks: JSON Lines of {\"prompt\"} or {\"messages\"} "
                             "(optional max_tokens, answer) or a .txt with one prompt per line; accuracy is then the "
                             "share of greedy answers unchanged from the full model's (--max-drop 5: at most 5%% "
                             "changed)")
    if store:
        parser.add_argument("--store-prompts", action="store_true",
                            help="store the prompts' text with the study (default: only their hashes and lengths)")
    if store if judge is None else judge:
        from poptune.evaluate.prompts import JUDGES

        parser.add_argument("--judge", choices=tuple(JUDGES), default=None,
                            help="what the drop (a study's --max-drop) is on. With --prompts: answers (the share "
                                 "of greedy answers "
                                 "changed from the full model's, default), references (the paired drop in the "
                                 "share of answers containing the request's `answer`, on the requests that have one) "
                                 "or likelihood (the paired drop in the mean probability of the full answer's "
                                 "tokens under the configuration's prefill, in points). With --tasks: each task's "
                                 "accuracy (default), or likelihood (the same likelihood drop on the items of the "
                                 "tasks that generate an answer, e.g. --tasks longctx_squad or embedded: a "
                                 "continuous outcome that decides with far fewer items, but its verdict bounds "
                                 "that likelihood, never accuracy: it ranks configurations as accuracy does, yet "
                                 "a likelihood drop under the budget can hide a larger accuracy drop, "
                                 "leaderboards/likelihood-accuracy-link-*)")


def add_preset(parser: argparse.ArgumentParser) -> None:
    """``--preset``: a study's size by name (:mod:`poptune.problem.presets`); explicit options override it."""
    sizes = "; ".join(f"{name}: {p.trials} configurations, {p.items}-{p.limit} items per task, at most {p.max_pairs} "
                      f"pairs" for name, p in PRESETS.items())
    parser.add_argument("--preset", choices=tuple(PRESETS), default=DEFAULT_PRESET,
                        help=f"study size (default: {DEFAULT_PRESET}): {sizes}; --trials, --items, --limit, "
                             "--max-pairs and --max-seconds override it")


def add_precision(parser: argparse.ArgumentParser, *, repeats: Any, max_pairs: Any, max_seconds: Any, precision: Any,
                  stop: str, preset: bool = False) -> None:
    """The timing pairs of a measurement: at least ``--repeats``, then on until ``--precision``, within caps
    (with ``preset``, the caps default to the preset's, ``max_pairs`` and ``max_seconds`` being standard's). The
    defaults are the library's (values, or :class:`~poptune.cli._options.LibraryDefault`)."""
    parser.add_argument("--repeats", type=count, default=repeats,
                        help="least measured/full timing pairs (default: %(default)s)")
    parser.add_argument("--precision", type=finite, default=precision,
                        help="pairs continue until the speedup's 95%% interval is +- this fraction of it "
                             f"(default: %(default)s; 0: stop at {stop})")
    caps = {"--max-pairs": (pairs_cap, max_pairs, "most timing pairs per measurement"),
            "--max-seconds": (finite, max_seconds, "most seconds per measurement while chasing --precision")}
    for flag, (kind, default, what) in caps.items():
        if preset:  # the preset's, unless given
            shown = f"{default:g}" if isinstance(default, float) else default
            parser.add_argument(flag, type=kind, default=None, help=f"{what} (default: the preset's; standard: "
                                f"{shown})")
        else:
            parser.add_argument(flag, type=kind, default=default, help=f"{what} (default: %(default)s)")


def preset_of(args: argparse.Namespace) -> Preset:
    """The preset of ``args`` with the options given explicitly in its place."""
    from poptune.problem.presets import sized

    return sized(getattr(args, "preset", None), trials=getattr(args, "trials", None), items=args.items,
                 limit=args.limit, max_pairs=args.max_pairs, max_seconds=args.max_seconds)


def problem(args: argparse.Namespace) -> Any:
    """The :class:`~poptune.problem.problem.TuningProblem` of :func:`add_problem`'s options (data checked now)."""
    from poptune.evaluate.prompts import PROMPT_TASKS
    from poptune.evaluate.suite import EMBEDDED, resolve_tasks
    from poptune.evaluate.taskpack import check_data, data_dir
    from poptune.problem.problem import default_tasks

    resolve_defaults(args)  # parsed without main (a caller in the same process): the library's defaults now
    directory = data_dir(args.data_dir)
    prompts = getattr(args, "prompts", None)
    judge = getattr(args, "judge", None)
    if prompts is not None:
        from poptune.evaluate.prompts import JUDGES, REFERENCES

        tasks: tuple[str, ...] = (JUDGES[judge or "answers"],)
    else:
        tasks = resolve_tasks(",".join(items(args.tasks)), directory) if args.tasks is not None \
            else default_tasks(directory is not None)  # `--tasks ""` is refused, not the default
        if judge == "likelihood":  # the tasks judged by their full answer's likelihood (poptune.evaluate.judges)
            from poptune.evaluate.judges import judged_tasks

            tasks = judged_tasks(tasks, defaults=args.tasks is None)
    from poptune.evaluate.judges import base_task

    # a prompts file is its own workload; a likelihood-judged task reads its base task's data
    real = list(dict.fromkeys(base_task(t) for t in tasks if base_task(t) not in EMBEDDED and t not in PROMPT_TASKS))
    if directory is not None and real:
        check_data(directory, real)
    size = preset_of(args)
    limit = size.limit if args.limit is not None else size.limit_for(tasks)  # an explicit --limit wins
    # Without --certify a study plans its certification, up to the preset's most (poptune.tune.certify).
    planned = getattr(args, "time_budget", False) is not False and getattr(args, "certify", None) is None
    certify = args.certify if getattr(args, "certify", None) is not None else \
        size.plan_for(tasks) if planned else size.certify_for(tasks)
    if prompts is not None and args.limit is None and getattr(args, "certify", None) is None:
        from poptune.evaluate.prompts import read_prompts
        from poptune.problem.presets import prompts_split

        requests = read_prompts(prompts)
        supplied = sum(r.answer is not None for r in requests) if tasks == (REFERENCES,) else len(requests)
        limit, certify = prompts_split(supplied, limit, certify)  # a small file: halved
    _check_counts(args, tasks, directory, limit, certify)
    image = None
    if args.image is not None:
        from poptune.models.vision import check_takes_images, parse_image_sizes

        sizes = parse_image_sizes(",".join(items(args.image)), "--image")
        if len(sizes) != 1:
            raise ConfigError(f"`--image` of a study takes one WIDTHxHEIGHT size (its target prompt), "
                              f"got {','.join(items(args.image))!r}")
        if args.lengths is not None:
            raise ConfigError("give `--lengths` (text prompts) or `--image` (an image prompt), not both")
        check_takes_images(args.model)
        image = str(sizes[0])
    return TuningProblem(
        model=args.model, tasks=tasks, lengths=tuple(int_list(args.lengths, "--lengths")) if args.lengths
        else default_of(TuningProblem, "lengths"), limit=limit,
        image=image, data_dir=str(directory) if directory and real else None, max_drop=args.max_drop,
        device=args.device,
        dtype=args.dtype, weights=args.weights, repeats=args.repeats, seed=args.seed, items_start=size.items,
        precision=args.precision or None, max_pairs=max(size.max_pairs, args.repeats), max_seconds=size.max_seconds,
        kv=kv_sources(args.kv), certify_limit=certify,
        prompts=str(Path(prompts).expanduser().resolve()) if prompts else None,
        prompts_sha256=_prompts_sha256(prompts), store_prompts=bool(getattr(args, "store_prompts", False)),
        runtime=getattr(args, "runtime", "hf"),
    )


def _check_counts(args: argparse.Namespace, tasks: tuple[str, ...], directory: Path | None, limit: int,
                  certify: int) -> None:
    """Counts no task can supply refused now, in one line, not after building items for hours (issue 57)."""
    from poptune.evaluate.workload import check_supply

    explicit = {name: value for name, value in (("--limit", args.limit), ("--certify", getattr(args, "certify", None)),
                                                ("--items", args.items)) if value is not None}
    certifies = args.max_drop is not None and certify > 0
    check_supply(tasks, directory, explicit, built=limit + (certify if certifies else 0))


def _prompts_sha256(prompts: str | None) -> str | None:
    """The prompts file's content hash: what a resumed study compares, not the file's path."""
    if prompts is None:
        return None
    from poptune.evaluate.prompts import prompts_sha256

    return prompts_sha256(prompts)


def add_calibration(parser: argparse.ArgumentParser) -> None:
    from poptune.kvfit.calibration import CalibrationSpec

    samples, length, seed_ = (default_of(CalibrationSpec, name) for name in ("samples", "length", "seed"))
    group = parser.add_argument_group("baseline calibration (WikiText-2 from the data directory, else generated)")
    group.add_argument("--calibration-samples", type=count, default=samples, help=f"sequences (default: {samples})")
    group.add_argument("--calibration-length", type=count, default=length,
                       help=f"tokens per sequence (default: {length})")
    group.add_argument("--calibration-seed", type=seed, default=seed_, help=f"seed of the windows (default: {seed_})")


def calibration_spec(args: argparse.Namespace) -> Any:
    from poptune.evaluate.taskpack import data_dir
    from poptune.kvfit.calibration import CalibrationSpec, calibration_file

    directory = data_dir(args.data_dir)
    calibration_file(directory)  # a data directory without WikiText-2 fails now, not after the search
    return CalibrationSpec(samples=args.calibration_samples, length=args.calibration_length,
                           seed=args.calibration_seed, data_dir=str(directory) if directory else None)


def method_list(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """``"shortgpt,sleb"`` or ``"all"`` (or their items) -> method names (checked)."""
    from poptune.baselines import METHODS

    given = items(value)
    if not given:
        return ()
    names = METHODS if given == ("all",) else given
    unknown = [n for n in names if n not in METHODS]
    if unknown or not names:
        raise ConfigError(f"unknown baseline(s) {', '.join(unknown) or '(none)'}: use {', '.join(METHODS)} or all")
    return tuple(dict.fromkeys(names))


def config_list(value: str | Iterable[str] | None, option: str) -> tuple[PopConfig, ...]:
    """``option``'s comma-separated configurations, each a label :meth:`PopConfig.parse` reads
    (``SKIP/BOUNDARY/OFFSET`` or ``SKIP/BOUNDARY/OFFSET/KV``)."""
    return tuple(PopConfig.parse(part, option) for part in items(value))


def ratio_list(value: str | Iterable[str], option: str) -> tuple[float, ...]:
    """``option``'s comma-separated ratios, each in (0, 1), at least one."""
    text = ",".join(items(value))
    try:
        ratios = tuple(float(part) for part in items(value))
    except ValueError as e:
        raise ConfigError(f"`{option}` must be comma-separated numbers, got {text!r}") from e
    if not ratios or any(not 0 < r < 1 for r in ratios):
        raise ConfigError(f"`{option}` must be in (0, 1), got {text!r}")
    return ratios

