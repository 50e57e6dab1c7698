"""``lm_eval`` with the ``poptune`` model registered (and poptune's offline task pack, given a data directory).

lm-eval 0.4 discovers models only by import, so ``lm_eval --model poptune`` works wherever
``poptune.evaluate.lm`` was imported first. This module is that: the lm-eval command line, unchanged::

    POPTUNE_DATA=../shared/data python -m poptune.evaluate.harness run --model poptune \\
        --model_args pretrained=gemma-3,skip=6,boundary=last --tasks piqa --device cpu

With ``POPTUNE_DATA`` set, the task pack reading that directory is added as an ``--include_path``, so the task
names resolve to the local files instead of the hub. A poptune error (a bad ``--model_args`` value, an unknown
model, a missing device) ends the run as one line on stderr with exit code 2, as ``poptune``'s own commands do; an
unknown model or a configuration that cannot be built is refused before lm-eval starts
(:func:`poptune.evaluate.modelargs.check_model_args`), not after its task index. lm-eval's own errors are lm-eval's.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import NoReturn

#: poptune's own synthetic tasks: lm-eval's registry has other tasks of these names (``passkey`` is a hub task of
#: its ``libra`` group), which this route would otherwise download instead.
SYNTHETIC = ("passkey", "kv_recall")


def _refuse(message: object) -> NoReturn:
    """End the route as poptune's commands end on bad input: one line on stderr, exit code 2."""
    print(f"poptune harness: error: {message}", file=sys.stderr)
    raise SystemExit(2) from None


def check_tasks(argv: list[str]) -> None:
    """Refuse, in one line, poptune's synthetic task names on the lm-eval route (they would resolve to lm-eval's).

    Raises:
        SystemExit: with code 2 and the message, when ``--tasks`` (or ``-t``) names one, in any form lm-eval's
            parser reads: ``--tasks a,b``, ``--tasks a b``, ``--tasks=a``, the option given twice.
    """
    from poptune.evaluate.modelargs import option_values

    # lm-eval's --tasks/-t: space- or comma-separated names, the option given any number of times
    tasks = [t.strip() for value in option_values(argv, ("--tasks", "-t")) for t in value.split(",")]
    ours = list(dict.fromkeys(t for t in tasks if t in SYNTHETIC))
    if ours:
        _refuse(f"{', '.join(ours)} is poptune's synthetic task, not lm-eval's task of that name: run it with "
                f"`poptune eval --tasks {','.join(ours)}`")


def main() -> None:
    """``lm_eval`` with ``poptune`` registered; a :class:`~poptune.errors.PoptuneError` is one line, exit code 2."""
    check_tasks(sys.argv[1:])
    from poptune.errors import PoptuneError
    from poptune.evaluate.modelargs import check_model_args

    try:  # before lm-eval indexes its tasks (about 20 s here): a bad model or configuration is refused at once
        check_model_args(sys.argv[1:])
    except PoptuneError as e:
        _refuse(e)
    from lm_eval.__main__ import cli_evaluate

    import poptune.evaluate.lm  # noqa: F401  (registers "poptune")
    from poptune.evaluate.taskpack import data_dir, render_tasks

    directory = data_dir()
    with tempfile.TemporaryDirectory(prefix="poptune-tasks-") as rendered:
        if directory is not None and len(sys.argv) > 1 and sys.argv[1] == "run" and "--include_path" not in sys.argv:
            render_tasks(directory, Path(rendered))
            sys.argv += ["--include_path", rendered]
        try:
            cli_evaluate()
        except PoptuneError as e:
            _refuse(e)


if __name__ == "__main__":
    main()
