"""``poptune envs``: list the Gymnasium environment ids."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    parser = sub.add_parser("envs", help="list the Gymnasium environment ids")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from poptune.env import env_ids

    for env_id in env_ids():
        print(env_id)
    return 0
