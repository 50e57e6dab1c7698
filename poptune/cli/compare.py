"""``poptune compare``: POP and every structured-pruning baseline on the same items, with request timings.

Writes one raw record (JSON) for ``poptune leaderboard --records DIR`` (:mod:`poptune.comparison`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from poptune.baselines.methods import METHODS
from poptune.cli._args import (
    LibraryDefault,
    add_calibration,
    add_model,
    add_option,
    calibration_spec,
    check_output_path,
    comma_list,
    config_list,
    items,
    positive,
    ratio_list,
)
from poptune.cli._checks import non_negative
from poptune.errors import ConfigError
from poptune.kv import registry as kv_registry

#: POP's rows unless ``--pop`` says otherwise: the paper's rule (a third), the study's candidates on the
#: long-prompt pack and the embedded tasks, and half the layers.
DEFAULT_POP = "6/last/0,7/window-64/0,9/window-64/0"


def register(sub: Any) -> None:
    parser = sub.add_parser("compare", help="POP against structured-pruning baselines on the same items, with "
                            "request-profile timings: a raw record for `poptune leaderboard --records`")
    add_model(parser)
    add_option(parser, "--data-dir")
    parser.add_argument("--tasks", required=True, type=comma_list,
                        help="comma-separated accuracy tasks (e.g. longctx_squad,longctx_qasper or "
                        "piqa,arc_easy,hellaswag,winogrande,boolq); `none`: time only, a record whose timings the "
                        "leaderboard lends to the scored records of this model and machine")
    parser.add_argument("--workload", required=True, help="the workload's name in the leaderboard (e.g. long-prompts)")
    parser.add_argument("--items", type=positive, default=32, help="items per task, the same for every method "
                        "(default: 32)")
    parser.add_argument("--skip", type=non_negative, default=0, help="leave out the first SKIP items of every task's "
                        "order: the items a study chose its POP configuration on (searched and certified), so that "
                        "configuration is judged on items it was not chosen on (default: 0)")
    parser.add_argument("--pop", default=DEFAULT_POP, type=comma_list,
                        help=f"POP rows, SKIP/BOUNDARY/OFFSET,... (default: {DEFAULT_POP})")
    parser.add_argument("--methods", type=comma_list, default=",".join(METHODS),
                        help=f"baselines, comma-separated of {', '.join(METHODS)} (default: all)")
    parser.add_argument("--ratios", default="0.3333,0.5", type=comma_list,
                        help="layer (or parameter) ratios of the baselines (default: 0.3333,0.5; wanda: its 30%% "
                        "sparsity)")
    library = "poptune.comparison.measure:"  # the library's defaults: its request profiles, compare's parameters
    parser.add_argument("--profiles", default=LibraryDefault(library + "PROFILES"), type=comma_list,
                        help="request profiles PROMPT+OUTPUT tokens (default: %(default)s); `none`: score only, "
                        "the leaderboard then takes the timings of another record of this model and machine")
    parser.add_argument("--pairs", type=positive, default=LibraryDefault(library + "compare.pairs"),
                        help="timing pairs per profile (default: %(default)s, >= 6)")
    parser.add_argument("--decode-steps", type=positive, default=LibraryDefault(library + "compare.decode_steps"),
                        help="decode steps timed per pair (default: %(default)s)")
    add_calibration(parser)
    parser.add_argument("--out", required=True, help="the raw record to write (JSON), e.g. "
                        "leaderboards/raw/methods-long-prompts-gemma-3-270m-<hardware>.json")
    parser.set_defaults(run=run)


def _pop(value: Any, model: str, weights: str) -> tuple[Any, ...]:
    """``--pop``'s configurations, checked against the model's layers read from its configuration (before it
    loads; issue 87: the default's 9/window-64/0 on a 6-layer model said only "`skip` must be in [0, 5]")."""
    from poptune.models.registry import layer_count

    configs = config_list(value, "--pop")
    if not configs:
        raise ConfigError("`--pop` needs at least one configuration")
    if not all(kv_registry.is_default(c.kv) for c in configs):
        raise ConfigError("`--pop` compares POP with the layers' own K/V only (SKIP/BOUNDARY/OFFSET)")
    twice = sorted({c.label for c in configs if configs.count(c) > 1})
    if twice:
        raise ConfigError(f"`--pop` names {', '.join(twice)} twice: each row once")
    layers = layer_count(model, weights)
    for config in configs:
        if layers is None:  # none at hand without loading it: the model's load checks them
            break
        try:
            config.check(layers)
        except ConfigError as e:
            given = ",".join(items(value))
            shown = f"its default {given}" if given == DEFAULT_POP else given
            raise ConfigError(f"`--pop` ({shown}) names {config.skip}/{config.boundary}/"
                              f"{config.offset}, which does not fit {model}'s {layers} layers ({e}): give --pop rows "
                              "that do") from None
    return configs


def _profiles(value: Any) -> list[Any]:
    """``--profiles``: PROMPT+OUTPUT items (or the library's profiles, its default), or ``none``."""
    from poptune.comparison.measure import Profile

    if items(value) == ("none",):
        return []
    out: list[Any] = []
    for part in items(value):
        if isinstance(part, Profile):
            out.append(part)
            continue
        try:
            prompt, output = (int(x) for x in part.split("+"))
        except ValueError as e:
            raise ConfigError(f"`--profiles` takes PROMPT+OUTPUT items, got {part!r}") from e
        if prompt < 1 or output < 1:
            raise ConfigError(f"a profile needs >= 1 prompt and output token, got {part!r}")
        out.append(Profile(prompt, output))
    if not out:
        raise ConfigError("`--profiles` needs at least one profile, or `none`")
    return out


def _choices(value: Any, allowed: tuple[str, ...], name: str) -> list[str]:
    picked = list(items(value))
    unknown = [m for m in picked if m not in allowed]
    if unknown:
        raise ConfigError(f"unknown {name} {', '.join(unknown)}: use {', '.join(allowed)}")
    if not picked:
        raise ConfigError(f"no {name} given: use one or more of {', '.join(allowed)}")
    if len(set(picked)) != len(picked):
        raise ConfigError(f"a {name.removesuffix('(s)')} given twice: {','.join(picked)!r}")
    return picked


def run(args: argparse.Namespace) -> int:
    from poptune.comparison.measure import compare, methods_for
    from poptune.evaluate.suite import EMBEDDED, resolve_tasks
    from poptune.evaluate.taskpack import check_data, data_dir
    from poptune.evaluate.workload import check_supply
    from poptune.files import write_text
    from poptune.measure.provenance import typed_command
    from poptune.problem.evaluator import ConfigEvaluator
    from poptune.problem.problem import TuningProblem

    if not args.workload.strip():
        raise ConfigError("`--workload` names the workload in the leaderboard: it must not be empty")
    pop, profiles = _pop(args.pop, args.model, args.weights), _profiles(args.profiles)
    methods, ratios = _choices(args.methods, METHODS, "baseline(s)"), ratio_list(args.ratios, "--ratios")
    if args.pairs < 6:
        raise ConfigError(f"`--pairs` must be >= 6 (an interval of the median at 95%), got {args.pairs}")
    timing_only = tuple(t.lower() for t in items(args.tasks)) == ("none",)
    if timing_only and not profiles:
        raise ConfigError("`--tasks none` times only: it needs `--profiles`, not `none`")
    check_output_path(args.out)
    if Path(args.out).exists():  # a record is added beside the others, never overwritten (issue 86)
        raise ConfigError(f"{args.out} exists: a record is never overwritten (a follow-up scores new items into "
                          "a new record: the board's cost line names one); give another --out")
    directory = data_dir(args.data_dir)
    tasks = resolve_tasks("embedded" if timing_only else ",".join(items(args.tasks)), directory)
    real = [t for t in tasks if t not in EMBEDDED]
    if real:
        if directory is None:
            raise ConfigError(f"tasks {', '.join(real)} need a data directory (--data-dir or $POPTUNE_DATA)")
        check_data(directory, real)
    check_supply(tasks, directory, {"--skip": args.skip, "--items": args.items}, built=args.skip + args.items)
    problem = TuningProblem(model=args.model, tasks=tasks, data_dir=str(directory) if directory else None,
                            device=args.device, dtype=args.dtype, weights=args.weights,
                            limit=args.skip + args.items, items_start=args.items, max_drop=None, certify_limit=0)
    evaluator = ConfigEvaluator(problem)

    def say(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    rows = methods_for(evaluator, pop, methods, ratios, calibration_spec(args), progress=say)
    record = compare(evaluator, rows, workload=args.workload, per_task=0 if timing_only else args.items,
                     skip=args.skip, profiles=profiles, pairs=args.pairs, decode_steps=args.decode_steps, progress=say,
                     command=typed_command(args.argv))  # as a user types it: no path of this machine
    write_text(args.out, json.dumps(record, indent=1, sort_keys=True))
    scored = sum(len(v) for v in record["methods"][0].get("items", {}).values())
    print(f"wrote {args.out}: {len(rows)} methods" + (f" on {scored} items" if scored else ", timings only"))
    return 0
