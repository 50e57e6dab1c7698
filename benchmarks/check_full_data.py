"""Check a full data directory: every task of the offline pack loads, with the item counts its README states.

The unit tests read only the small cuts in ``tests/data``; this is the check on the full sets they were cut from
(it used to be a test that skipped wherever the data was absent).

Usage::

    python benchmarks/check_full_data.py --data-dir ../shared/data      # or POPTUNE_DATA=../shared/data

Prints one line per task and exits 1 if a count differs.
"""

from __future__ import annotations

import argparse
import sys

from poptune.evaluate.taskpack import TASKS, check_data, data_dir, get_task_dict

#: Item counts of the full evaluation splits (``/work/shared/data/README.md``).
EXPECTED = {"piqa": 1838, "arc_easy": 2376, "arc_challenge": 1172, "hellaswag": 10042, "winogrande": 1267,
            "boolq": 3270}


def main(argv: list[str] | None = None) -> int:
    """Load every task from the data directory and compare its item count with :data:`EXPECTED`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="full data directory (default: $POPTUNE_DATA)")
    args = parser.parse_args(argv)
    root = data_dir(args.data_dir)
    if root is None:
        parser.error("give --data-dir or set POPTUNE_DATA")
    check_data(root, TASKS)
    tasks = get_task_dict(TASKS, root)["tasks"]
    wrong = 0
    for name in TASKS:
        count = len(tasks[name].eval_docs)
        ok = count == EXPECTED[name]
        wrong += not ok
        print(f"{name:14s} {count:6d} items {'ok' if ok else f'EXPECTED {EXPECTED[name]}'}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
