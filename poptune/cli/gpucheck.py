"""``poptune gpu-check``: the prepared GPU check, one command for one call of a lent GPU machine.

``--out DIR`` on one large GPU (an H200: about 4.5 minutes of rows); ``--tiny`` runs tiny models in seconds (on
CPU the NVML parts say why not); ``--dry-run`` does no device work: every stage's code path runs on the CPU under the
full model names, with
tiny stand-in models (a report marked DRY RUN that fails only where a stage breaks);
``--versions`` is the version preflight alone, one line per package. Exit status 1 when any FAIL line was
printed. docs/gpu-check.md explains every line.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from poptune.cli._checks import finite
from poptune.errors import ConfigError


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
    parser.add_argument("--deadline", type=finite,
                        help="wall-clock time (seconds since the epoch) all stages must end by, set by the device "
                             "script from its own start; overrides --budget")
    parser.add_argument("--dry-run", action="store_true", help="no device work: every stage's code path on the CPU "
                        "with tiny stand-ins under the full model names (a DRY RUN report)")
    parser.add_argument("--versions", action="store_true", help="only the version preflight, one line per package")
    parser.set_defaults(run=run)


def offline() -> None:
    """No hub look-ups: set before anything imports transformers or huggingface_hub (they read these once, at
    import). The device has no network, and a look-up there waits for its time-out instead of failing at once."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def check_out(out: str) -> None:
    """Fail before any device work if the report cannot be written in ``out``: a file or a device in the folder's
    place, a read-only folder, or a report file that is not a regular file (the check writes through it)."""
    from pathlib import Path

    from poptune.files import check_regular, check_writable_folder

    folder = Path(out)
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"`--out` {out} is a file, not a folder (the folder of gpu-check.json and gpu-check.md)")
    existing = next(p for p in (folder, *folder.parents) if p.exists())  # made with its parents, if missing
    check_writable_folder(existing)
    for name in ("gpu-check.json", "gpu-check.md"):
        check_regular(folder / name, "report file")


def run(args: argparse.Namespace) -> int:
    offline()
    if args.versions:
        from poptune.gpucheck.preflight import version_checks

        checks = version_checks()
        print("\n".join(c.line() for c in checks), flush=True)
        return 1 if any(c.status == "FAIL" for c in checks) else 0
    if not args.out:
        raise ConfigError("`--out` is required (the folder of gpu-check.json and gpu-check.md), or pass --versions")
    if args.budget is not None and args.budget <= 0:
        raise ConfigError(f"`--budget` must be positive seconds, got {args.budget:g} (it would run nothing)")
    check_out(args.out)
    from pathlib import Path

    from poptune.gpucheck.check import run as run_check
    from poptune.gpucheck.report import failures

    budget = {} if args.budget is None else {"budget": args.budget}
    if args.deadline is not None:
        budget["deadline"] = args.deadline
    report = run_check(Path(args.out), tiny=args.tiny, device=args.device, dry_run=args.dry_run, **budget)
    print("\n".join(report.lines()), flush=True)
    return 1 if failures(report.data) else 0
