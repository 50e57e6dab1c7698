"""``poptune gpu-check``: the prepared GPU check, one command for one call of a lent GPU machine.

``--out DIR`` on one large GPU (an H200: about 4.5 minutes of rows); ``--tiny`` runs tiny models in seconds (on
CPU the NVML parts say why not); ``--dry-run`` does no device work (every stage SKIP with its expected time);
``--versions`` is the version preflight alone, one line per package. Exit status 1 when any FAIL line was
printed. docs/gpu-check.md explains every line.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from poptune.errors import ConfigError

from ._checks import finite


def register(sub: Any) -> None:
    parser = sub.add_parser("gpu-check", help="the prepared GPU check: does poptune measure this GPU right "
                            "(docs/gpu-check.md)")
    parser.add_argument("--out", help="folder for gpu-check.json and gpu-check.md")
    parser.add_argument("--tiny", action="store_true", help="tiny random models (seconds; runs on CPU)")
    parser.add_argument("--device", help="cuda, cuda:N or cpu (default: cuda where available, else cpu)")
    # The default lives in poptune.gpucheck.check (BUDGET_SECONDS), not imported here: it loads torch.
    parser.add_argument("--budget", type=finite,
                        help="seconds for all stages: one that would not finish in what is left is skipped "
                             "(default: 330)")
    parser.add_argument("--dry-run", action="store_true", help="no device work: each stage SKIP, its expected time")
    parser.add_argument("--versions", action="store_true", help="only the version preflight, one line per package")
    parser.set_defaults(run=run)


def offline() -> None:
    """No hub look-ups: set before anything imports transformers or huggingface_hub (they read these once, at
    import). The device has no network, and a look-up there waits for its time-out instead of failing at once."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def run(args: argparse.Namespace) -> int:
    offline()
    if args.versions:
        from poptune.gpucheck.preflight import version_checks

        checks = version_checks()
        print("\n".join(c.line() for c in checks), flush=True)
        return 1 if any(c.status == "FAIL" for c in checks) else 0
    if not args.out:
        raise ConfigError("`--out` is required (the folder of gpu-check.json and gpu-check.md), or pass --versions")
    from pathlib import Path

    from poptune.gpucheck.check import run as run_check
    from poptune.gpucheck.report import failures

    budget = {} if args.budget is None else {"budget": args.budget}
    report = run_check(Path(args.out), tiny=args.tiny, device=args.device, dry_run=args.dry_run, **budget)
    print("\n".join(report.lines()), flush=True)
    return 1 if failures(report.data) else 0
