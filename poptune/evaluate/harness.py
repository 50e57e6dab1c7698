"""``lm_eval`` with the ``poptune`` model registered (and poptune's offline task pack, given a data directory).

lm-eval 0.4 discovers models only by import, so ``lm_eval --model poptune`` works wherever
``poptune.evaluate.lm`` was imported first. This module is that: the lm-eval command line, unchanged::

    POPTUNE_DATA=../shared/data python -m poptune.evaluate.harness run --model poptune \\
        --model_args pretrained=gemma-3,skip=6,boundary=last --tasks piqa --device cpu

With ``POPTUNE_DATA`` set, the task pack reading that directory is added as an ``--include_path``, so the task
names resolve to the local files instead of the hub.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path


def main() -> None:
    import poptune.evaluate.lm  # noqa: F401  (registers "poptune")
    from lm_eval.__main__ import cli_evaluate

    from poptune.evaluate.taskpack import data_dir, render_tasks

    directory = data_dir()
    with tempfile.TemporaryDirectory(prefix="poptune-tasks-") as rendered:
        if directory is not None and len(sys.argv) > 1 and sys.argv[1] == "run" and "--include_path" not in sys.argv:
            render_tasks(directory, Path(rendered))
            sys.argv += ["--include_path", rendered]
        cli_evaluate()


if __name__ == "__main__":
    main()
