"""``poptune export``: write the fastest stored configuration within an accuracy budget."""

from __future__ import annotations

import argparse
import json
from typing import Any

from poptune.cli._args import add_storage, budget


def register(sub: Any) -> None:
    parser = sub.add_parser("export", help="write the fastest stored configuration within an accuracy budget")
    parser.add_argument("--model", help="check that the study is of this model")
    add_storage(parser)
    parser.add_argument("--max-drop", type=budget, required=True,
                        help="accuracy budget in points (`none`: the fastest configuration, whatever its drop)")
    parser.add_argument("--out", metavar="PATH", help="write the configuration as JSON to PATH (default: print it)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from poptune.reports.export import check_export_path, export_config, write_export

    if args.out:
        check_export_path(args.out)  # the JSON and its K/V maps file beside it, before the study is read
    data = export_config(args.storage, args.study, max_drop=args.max_drop, model=args.model)
    text = json.dumps(data, indent=2)
    if not args.out:
        print(text)
        return 0
    written = write_export(data, args.out)
    cfg, obj = data["pop_config"], data["objectives"]
    interval = f" [{obj['speedup_lo']:.2f}, {obj['speedup_hi']:.2f}]" if obj.get("speedup_lo") else ""
    maps = f" (+ {written[1]})" if len(written) > 1 else ""
    print(f"wrote {args.out}{maps}: skip={cfg['skip']} boundary={cfg['boundary']} offset={cfg['offset']}"
          f"{_kv_label(cfg)}, "
          f"{obj['speedup']:.2f}x{interval} prefill, drop {obj['drop_points']:+.2f} points on "
          f"{data['hardware']['hardware_id']}")
    return 0


def _kv_label(cfg: dict[str, Any]) -> str:
    """``, <label>`` of an exported configuration's K/V source (nothing for the paper's)."""
    from poptune.kv import registry

    label = registry.source(cfg.get("kv", registry.DEFAULT)).label
    return f", {label}" if label else ""
