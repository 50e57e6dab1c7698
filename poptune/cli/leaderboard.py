"""``poptune leaderboard``: regenerate the leaderboards from stored studies."""

from __future__ import annotations

import argparse
from typing import Any

from poptune.cli._args import LibraryDefault, add_storage, positive

#: The default of ``--seeds``: the library's (write_leaderboards's).
SEEDS = LibraryDefault("poptune.reports.leaderboard:write_leaderboards.seeds")


def register(sub: Any) -> None:
    parser = sub.add_parser("leaderboard", help="regenerate leaderboards/ (POP vs baselines, tuners) from studies")
    add_storage(parser, study=None)  # every study of the storage
    parser.add_argument("--out", default="leaderboards", help="output folder (default: leaderboards)")
    parser.add_argument("--seeds", type=positive, default=SEEDS,
                        help="seeds per sampler in the tuner tables (default: %(default)s)")
    parser.add_argument("--records", metavar="DIR",
                        help="rebuild the methods leaderboard (POP against structured pruning) from the raw "
                             "`poptune compare` records in DIR instead (e.g. leaderboards/raw)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from poptune import store
    from poptune.measure.provenance import typed_command
    from poptune.reports.leaderboard import write_leaderboards

    if args.records:
        return _records(args)
    command = typed_command(["leaderboard", *(["--storage", store.public_url(args.storage)] if args.storage else []),
                             *(["--out", args.out] if args.out != "leaderboards" else []),
                             *(["--seeds", str(args.seeds)] if args.seeds != SEEDS.value() else [])])
    for path in write_leaderboards(args.storage, args.out, command=command, seeds=args.seeds):
        print(f"wrote {path}")
    return 0


def _records(args: argparse.Namespace) -> int:
    from pathlib import Path

    from poptune.comparison.board import write_methods_board
    from poptune.errors import ConfigError
    from poptune.measure.provenance import typed_command

    if not Path(args.records).is_dir():
        raise ConfigError(f"`--records` {args.records} is not a folder")
    command = typed_command(["leaderboard", "--records", args.records,
                             *(["--out", args.out] if args.out != "leaderboards" else [])])
    written = write_methods_board(args.records, args.out, command=command)
    if not written:
        raise ConfigError(f"no methods comparison record (methods-*.json from `poptune compare`) in {args.records}")
    for path in written:
        print(f"wrote {path}")
    return 0
