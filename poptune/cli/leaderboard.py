"""``poptune leaderboard``: regenerate the leaderboards from stored studies."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from ._args import add_storage, positive


def register(sub: Any) -> None:
    parser = sub.add_parser("leaderboard", help="regenerate leaderboards/ (POP vs baselines, tuners) from studies")
    add_storage(parser, study=None)  # every study of the storage
    parser.add_argument("--out", default="leaderboards", help="output folder (default: leaderboards)")
    parser.add_argument("--seeds", type=positive, default=10,
                        help="seeds per sampler in the tuner tables (default: 10)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from poptune import store
    from poptune.leaderboard import write_leaderboards

    command = "poptune leaderboard " + shlex.join(
        [*(["--storage", store.public_url(args.storage)] if args.storage else []),
         *(["--out", args.out] if args.out != "leaderboards" else []),
         *(["--seeds", str(args.seeds)] if args.seeds != 10 else [])])
    for path in write_leaderboards(args.storage, args.out, command=command.strip(), seeds=args.seeds):
        print(f"wrote {path}")
    return 0
