"""``poptune grid``: measure every configuration of the search space on this machine, and write it as a table.

The grid is a study with the ``grid`` sampler on ``poptune study``'s workload (its own options and defaults:
with a data directory the long-prompt pack, else the embedded synthetic tasks), stored by default in a journal
file beside the table, so that the same command continues where it stopped (:mod:`poptune.tune.gridstudy`), then
written as a table and its README (:mod:`poptune.reports.gridtable`).
``--table-only`` writes the table and its README from what is stored, measuring nothing. docs/grid.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from poptune.cli._args import LibraryDefault, add_model, add_preset, add_problem, add_storage, problem
from poptune.cli._checks import finite, positive


def register(sub: Any) -> None:
    parser = sub.add_parser("grid", help="measure every configuration of the search space and write it as a table "
                            "(docs/grid.md)")
    add_model(parser)
    add_preset(parser)
    add_problem(parser)
    add_storage(parser, study="<model>@<hardware-id>")
    parser.add_argument("--no-confirm", action="store_true",
                        help="skip the A/A checks, the re-measures of noisy trials and the confirmation pass")
    parser.add_argument("--timeout", type=finite, help="stop starting trials after this many seconds (resume later)")
    parser.add_argument("--out", default=LibraryDefault("poptune.tune.gridstudy:GridSpec.out"),
                        help="folder of the table, its README and (by default) the grid's journal file (default: "
                             "%(default)s/ of the current directory)")
    parser.add_argument("--batch", type=positive, default=LibraryDefault("poptune.tune.gridstudy:GridSpec.batch"),
                        metavar="CONFIGURATIONS",
                        help="configurations measured at a time, their accuracy raced together: each batch of items "
                        "is scored in one pass for all of them, the same measurements (default: %(default)s; a "
                        "GPU's decode steps cost about the same for many rows as for few)")
    parser.add_argument("--table-only", action="store_true",
                        help="write the table and its README from the stored grid, measuring nothing")
    parser.set_defaults(run=run)


def _progress(total: int) -> Any:
    from poptune import store
    from poptune.cli.study import trial_line

    started = time.monotonic()

    def finished(study: Any, trial: Any) -> None:
        import optuna

        if trial.state != optuna.trial.TrialState.COMPLETE:
            return
        measured = sum(store.StoredTrial.of(t).measured for t in store.completed(study))
        print(f"[{measured}/{total}, {time.monotonic() - started:.0f} s] {trial_line(store.StoredTrial.of(trial))}",
              flush=True)

    return finished


def run(args: argparse.Namespace) -> int:
    from poptune import store
    from poptune.errors import ConfigError
    from poptune.measure.provenance import typed_command
    from poptune.reports.gridtable import write
    from poptune.tune.gridstudy import GridSpec, grid_study, storage_of
    from poptune.tune.interrupt import exit_code, interruptible

    if args.timeout is not None and args.timeout <= 0:  # before anything is made in --out (its raw/ folder)
        raise ConfigError(f"`--timeout` must be positive seconds, got {args.timeout:g}")

    spec = GridSpec(problem=problem(args), out=args.out, storage=args.storage, study=args.study,
                    timeout=args.timeout, confirm=not args.no_confirm, table_only=args.table_only, batch=args.batch)
    storage = storage_of(spec)
    progress: list[Any] = []

    def announce(total: int, layers: int) -> None:
        progress.append(_progress(total))
        print(f"grid of {total} configurations ({layers} layers) in {store.public_url(storage)}", flush=True)

    def finished(study: Any, trial: Any) -> None:
        progress[0](study, trial)

    try:
        with interruptible():
            study = grid_study(spec, callbacks=[finished], announce=announce)
            csv_path, md_path = write(study, spec.out, typed_command(args.argv), storage)
    except KeyboardInterrupt as e:
        print(f"poptune grid: interrupted; the measured trials are stored in {store.public_url(storage)}: run the "
              "same command to continue", file=sys.stderr)
        return exit_code(e)
    print(f"wrote {csv_path}\nwrote {md_path}")
    return 0
