"""Benchmark: calibrated K/V against the layers' own projections, on held-out WikiText-2 text.

For each skip (``--skips``, boundary ``last``), POP with the skipped layers' own K/V projections (the paper) and
with calibrated maps (:mod:`poptune.kvfit.fit`: fitted on WikiText-2 *validation* windows) prefill the same
``--pairs`` contexts of WikiText-2 *test* (``--context`` tokens after BOS, at evenly spaced offsets); the next
``--continuation`` tokens are scored at full depth from that cache. Per pair: the continuation's mean NLL gap to
the full model (nats per token) and KL(full || POP) of the first token after the prompt (the one boundary
handling protects) and over all positions. Each figure is a mean over pairs with its 95% paired bootstrap
interval (:func:`poptune.evaluate.paired.paired_drop`, seeded), and calibrated minus own is paired too.
Null check: at skip 1 the two must agree exactly (the block's first layer has no map).

Usage::

    python benchmarks/kv_calibration.py --data-dir ../shared/data [--skips 4,6,9,12] [--pairs 48]

Writes ``leaderboards/kv-calibration-<model>.md`` and ``.json``.

**Held-out sweep** (``--lengths``, issue 38): contexts of each length (BOS included) of WikiText-2 *test* at
evenly spaced offsets, ``--windows`` of them per length, the next ``--continuation`` tokens scored at full depth
after the POP prefill of the context (:func:`poptune.kvfit.check.continuation_nll`, as the project's likelihood
scoring does), own against calibrated K/V at every skip, paired over the same windows: the mean of the per-window
differences (calibrated minus own) with its 95% t interval (``scipy.stats.ttest_1samp``). The layers before the
block are replayed from the full model's states (:mod:`poptune.engine.prefix`: exact, and the only way 2,048-token
contexts fit the budget)::

    python benchmarks/kv_calibration.py --data-dir ../shared/data --lengths 64,128,512,2048 --windows 64,48,24,8

Writes ``leaderboards/kv-heldout-<model>-<hardware>.md`` and its rows ``leaderboards/raw/...json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

import torch

from poptune import PopConfig, apply_pop, load_model
from poptune.data import wikitext_path
from poptune.engine import remove_pop
from poptune.evaluate.fidelity import FidelitySpec, fidelity_pairs
from poptune.evaluate.paired import paired_drop
from poptune.evaluate.scoring import continuation_logprobs
from poptune.kvfit.fit import KVFitSpec, KVFitter
from poptune.kvfit.prepare import prepare_kv
from poptune.measure.hardware import fingerprint
from poptune.measure.provenance import typed_command, versions
from poptune.models.registry import weights_fingerprint

ROOT = Path(__file__).resolve().parents[1]


def _per_pair(model, tok, config, pairs, batch):
    """Per pair: (the continuation's log-probabilities (m, V)) under ``config`` (None: the full model)."""
    out = []
    for start in range(0, len(pairs), batch):
        chunk = pairs[start : start + batch]
        if config is None:
            remove_pop(model)
            out += continuation_logprobs(model, [c for c, _ in chunk], [c for _, c in chunk], pad_id=tok.pad_token_id)
        else:
            with apply_pop(model, config):
                out += continuation_logprobs(model, [c for c, _ in chunk], [c for _, c in chunk],
                                             pad_id=tok.pad_token_id)
    return out


def _figures(full, pop, pairs):
    """Per pair: mean NLL of the continuation, KL(full || POP) at the first position and over all positions."""
    nll, kl0, kl = [], [], []
    for (_, cont), f, p in zip(pairs, full, pop):
        target = torch.tensor(cont).unsqueeze(1)
        nll.append(float(-p.gather(1, target).mean()))
        per_position = (f.exp() * (f - p)).sum(-1).double()
        kl0.append(float(per_position[0]))
        kl.append(float(per_position.mean()))
    return {"nll": nll, "kl0": kl0, "kl": kl}


def _interval(values, reference=None):
    """Mean of ``values`` (minus ``reference`` item by item) with its 95% bootstrap interval."""
    base = reference if reference is not None else [0.0] * len(values)
    return paired_drop({"x": base}, {"x": values}, lower_is_better=["x"], scale=1.0).to_dict()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--skips", default="4,6,9,12")
    parser.add_argument("--pairs", type=int, default=48)
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--continuation", type=int, default=32)
    parser.add_argument("--ridge", type=float, default=KVFitSpec.ridge)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--out", default=str(ROOT / "leaderboards"))
    parser.add_argument("--lengths", help="the held-out sweep: context lengths (BOS included), e.g. 64,128,512,2048")
    parser.add_argument("--windows", help="the held-out sweep: contexts per length, e.g. 64,48,24,8")
    args = parser.parse_args()
    if args.lengths:
        sweep(args)
        return

    began = time.perf_counter()
    model, tok = load_model(args.model)
    weights = weights_fingerprint(args.model)
    text = wikitext_path(args.data_dir, "test").read_text(encoding="utf-8")
    pairs = fidelity_pairs(tok, text, FidelitySpec(args.context, args.continuation, args.pairs))
    fitter = KVFitter(model, tok, KVFitSpec(ridge=args.ridge, data_dir=args.data_dir), weights)
    with torch.inference_mode():
        full = _per_pair(model, tok, None, pairs, args.batch_size)
        full_nll = [float(-f.gather(1, torch.tensor(c).unsqueeze(1)).mean()) for (_, c), f in zip(pairs, full)]
        check = {}
        for kv in ("own", "calibrated"):  # null check: one skipped layer has no map
            config = PopConfig(1, kv=kv)
            if kv == "calibrated":
                prepare_kv(model, tok, config, fingerprint=weights, fitter=fitter)
            check[kv] = _figures(full, _per_pair(model, tok, config, pairs[:4], args.batch_size), pairs[:4])
        if check["own"] != check["calibrated"]:
            sys.exit("null check failed: at skip 1 calibrated K/V must equal the layers' own")
        rows = []
        for skip in [int(s) for s in args.skips.split(",")]:
            row = {"skip": skip}
            for kv in ("own", "calibrated"):
                config = PopConfig(skip, "last", kv=kv)
                if kv == "calibrated":
                    maps = prepare_kv(model, tok, config, fingerprint=weights, fitter=fitter)
                    row["fit"] = {"seconds": maps.meta.get("seconds"), "tokens": maps.meta.get("tokens"),
                                  "relative_error": maps.meta.get("relative_error")}
                row[kv] = _figures(full, _per_pair(model, tok, config, pairs, args.batch_size), pairs)
                print(f"skip {skip} {kv}: nll gap {_interval(row[kv]['nll'], full_nll)['mean']:+.4f}", flush=True)
            row["summary"] = {
                kv: {"nll_gap": _interval(row[kv]["nll"], full_nll), "kl0": _interval(row[kv]["kl0"]),
                     "kl": _interval(row[kv]["kl"])} for kv in ("own", "calibrated")}
            row["summary"]["calibrated_minus_own"] = {
                key: _interval(row["calibrated"][key], row["own"][key]) for key in ("nll", "kl0", "kl")}
            rows.append(row)
            _write(args, rows, fitter, time.perf_counter() - began)


def _ci(d, digits=4):
    return f"{d['mean']:+.{digits}f} [{d['lo']:+.{digits}f}, {d['hi']:+.{digits}f}]"


def _write(args, rows, fitter, seconds) -> None:
    command = typed_command(["benchmarks/kv_calibration.py", *sys.argv[1:]], program=None)
    hw = fingerprint("cpu")
    calib = fitter.describe()
    lines = [
        f"# Calibrated K/V for the skipped block: {args.model}, held-out WikiText-2",
        "",
        f"POP with boundary `last`; {args.pairs} contexts of {args.context} tokens of WikiText-2 **test** (evenly "
        f"spaced), the next {args.continuation} tokens scored at full depth from the POP-prefilled cache. Maps "
        f"fitted on WikiText-2 **validation** ({calib.get('samples')} windows of {calib.get('length')} tokens, "
        f"seed {calib.get('seed')}, ridge {args.ridge}). Each cell: the mean over contexts with its 95% paired "
        "bootstrap interval. NLL gap: the continuation's mean NLL minus the full model's (nats per token); KL: "
        "KL(full || POP) of the first token after the prompt (first) and over all positions (mean).",
        "",
        "| skip | NLL gap own | NLL gap calibrated | calibrated - own | first-token KL own | first-token KL "
        "calibrated | mean KL own | mean KL calibrated |",
        "|---:|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        s = row["summary"]
        lines.append(f"| {row['skip']} | {_ci(s['own']['nll_gap'])} | {_ci(s['calibrated']['nll_gap'])} | "
                     f"{_ci(s['calibrated_minus_own']['nll'])} | {_ci(s['own']['kl0'])} | "
                     f"{_ci(s['calibrated']['kl0'])} | {_ci(s['own']['kl'])} | {_ci(s['calibrated']['kl'])} |")
    lines += ["", "Null check: at skip 1 calibrated and own K/V give identical figures (passed).", "",
              "## Provenance", "", f"- command: `{command.strip()}`",
              f"- date: {dt.datetime.now(dt.timezone.utc).isoformat(timespec='seconds')}",
              f"- hardware: {hw.name} ({hw.hardware_id})",
              f"- versions: {', '.join(f'{k} {v}' for k, v in versions().items())}",
              f"- wall time so far: {seconds:.0f} s; fit seconds per block (residual stream once, not counted): "
              + ", ".join(f"{r['skip']}: {r['fit']['seconds']}" for r in rows), ""]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"kv-calibration-{args.model}"
    (out / f"{stem}.md").write_text("\n".join(lines))
    (out / f"{stem}.json").write_text(json.dumps({"command": command.strip(), "rows": rows, "calibration": calib,
                                                  "hardware": hw.to_dict(), "versions": versions()}) + "\n")
    print(f"wrote {out / stem}.md", flush=True)


def _windows(tok, text, length, count, continuation):
    """``count`` windows (count, length + continuation): BOS and ``length - 1`` tokens of context, then the
    continuation, at evenly spaced offsets of ``text``."""
    pairs = fidelity_pairs(tok, text, FidelitySpec(length - 1, continuation, count))
    return torch.tensor([c + n for c, n in pairs])


def _paired(calibrated, own):
    """Calibrated minus own, per window: mean, 95% t interval, count."""
    from scipy import stats

    diff = [c - o for c, o in zip(calibrated, own)]
    interval = stats.ttest_1samp(diff, 0.0).confidence_interval(0.95)
    return {"mean": sum(diff) / len(diff), "lo": float(interval.low), "hi": float(interval.high), "n": len(diff)}


def sweep(args) -> None:
    """The held-out sweep: per length and skip, the continuation NLL with own and with calibrated K/V."""
    from poptune.engine import apply_pop as pop
    from poptune.engine.prefix import PrefixStates
    from poptune.kvfit.check import continuation_nll

    began = time.perf_counter()
    torch.manual_seed(0)
    model, tok = load_model(args.model)
    weights = weights_fingerprint(args.model)
    text = wikitext_path(args.data_dir, "test").read_text(encoding="utf-8")
    fitter = KVFitter(model, tok, KVFitSpec(ridge=args.ridge, data_dir=args.data_dir), weights)
    skips = [int(s) for s in args.skips.split(",")]
    fits = {}
    for skip in skips:  # fitted on validation text only (or read from the cache)
        maps = prepare_kv(model, tok, PopConfig(skip, kv="calibrated"), fingerprint=weights, fitter=fitter)
        fits[skip] = {key: maps.meta.get(key) for key in ("sink_norm", "sink_tokens", "kept_own", "validation",
                                                          "calibration", "seconds")}
    rows = []
    for length, count in zip([int(x) for x in args.lengths.split(",")], [int(x) for x in args.windows.split(",")]):
        ids = _windows(tok, text, length, count, args.continuation)
        batches = [ids[i : i + args.batch_size] for i in range(0, len(ids), args.batch_size)]
        states = PrefixStates(max_bytes=6 << 30)
        with states.attached(model), torch.inference_mode():
            for batch in batches:  # the full model's prefill: records the states the POP prefills replay
                with pop(model, PopConfig(0)):
                    model(input_ids=batch[:, : -args.continuation], use_cache=True, logits_to_keep=1)
            print(f"length {length}: {len(ids)} windows recorded ({time.perf_counter() - began:.0f} s)", flush=True)
            for skip in skips:
                nll = {kv: [x for batch in batches for x in continuation_nll(
                    model, PopConfig(skip, "last", kv=kv), batch, args.continuation)] for kv in ("own", "calibrated")}
                row = {"length": length, "skip": skip, "windows": len(ids), "own": nll["own"],
                       "calibrated": nll["calibrated"], "calibrated_minus_own": _paired(nll["calibrated"], nll["own"])}
                rows.append(row)
                d = row["calibrated_minus_own"]
                print(f"length {length} skip {skip}: own {sum(nll['own']) / len(ids):.3f} calibrated "
                      f"{sum(nll['calibrated']) / len(ids):.3f} diff {d['mean']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}] "
                      f"n={d['n']} ({time.perf_counter() - began:.0f} s)", flush=True)
        if states.replayed == 0:
            sys.exit("the POP prefills did not replay the recorded states")
        _write_sweep(args, rows, fits, fitter, time.perf_counter() - began)


def _write_sweep(args, rows, fits, fitter, seconds) -> None:
    import subprocess

    command = typed_command(["benchmarks/kv_calibration.py", *sys.argv[1:]], program=None)
    hw = fingerprint("cpu")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT,
                            check=False).stdout.strip()
    calib = fitter.describe() or next(iter(fits.values()))["calibration"]  # maps read from the cache: theirs
    windows = ", ".join(f"{w['samples']} of {w['length']}" for w in calib.get("windows", []))
    lines = [
        f"# Calibrated K/V on held-out text with BOS: {args.model}, WikiText-2 test",
        "",
        f"POP with boundary `last`, the skipped block last. Contexts of WikiText-2 **test** (BOS, then the context's "
        f"other tokens, at evenly spaced offsets), the next {args.continuation} tokens scored at full depth after "
        "the POP prefill of the context. Maps fitted on WikiText-2 **validation** only "
        f"({windows} tokens, BOS first, every {calib.get('holdout')}th window held out to validate the fit; "
        f"ridge {args.ridge}). Each cell: calibrated minus own mean continuation NLL (nats per token), the mean "
        "of the per-window paired differences with its 95% t interval (scipy.stats.ttest_1samp), and the number "
        "of windows; negative: calibrated better. **Bold**: the interval excludes 0.",
        "",
        "| context tokens | " + " | ".join(f"skip {s}" for s in sorted({r['skip'] for r in rows})) + " |",
        "|---:|" + "---|" * len({r["skip"] for r in rows}),
    ]
    for length in sorted({r["length"] for r in rows}):
        cells = []
        for row in [r for r in rows if r["length"] == length]:
            d = row["calibrated_minus_own"]
            cell = f"{d['mean']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}] (n={d['n']})"
            cells.append(f"**{cell}**" if d["lo"] > 0 or d["hi"] < 0 else cell)
        lines.append(f"| {length} | " + " | ".join(cells) + " |")
    lines += ["", "Mean continuation NLL, own / calibrated:", "",
              "| context tokens | " + " | ".join(f"skip {s}" for s in sorted({r['skip'] for r in rows})) + " |",
              "|---:|" + "---|" * len({r["skip"] for r in rows})]
    for length in sorted({r["length"] for r in rows}):
        cells = [f"{sum(r['own']) / r['windows']:.3f} / {sum(r['calibrated']) / r['windows']:.3f}"
                 for r in rows if r["length"] == length]
        lines.append(f"| {length} | " + " | ".join(cells) + " |")
    lines += ["", "The fit per block (sink: tokens whose block-entry norm exceeds the threshold; check: the fit's "
              "held-out windows, calibrated minus own continuation NLL, one-sided t-test at the stated level, "
              "`poptune/kvfit/check.py`; maps not shown better are replaced by the layers' own):", ""]
    for skip, fit in fits.items():
        v = fit.get("validation") or {}
        decision = "maps kept" if fit["kept_own"] != "all (block)" else "layers' own kept"
        lines.append(f"- skip {skip}: sink norm {fit['sink_norm']}, {fit['sink_tokens']} sink tokens in the fit "
                     f"text; check on {v.get('windows')} windows ({v.get('points')} points each): own "
                     f"{v.get('own_nll', float('nan')):.3f} / calibrated {v.get('calibrated_nll', float('nan')):.3f}, "
                     f"difference {v.get('calibrated_minus_own', float('nan')):+.3f}, "
                     f"p = {v.get('p', float('nan')):.3g}"
                     f" (alpha {v.get('alpha')}): {decision}")
    lines += ["", "## Provenance", "", f"- command: `{command.strip()}`", f"- commit: {commit}",
              f"- date: {dt.datetime.now(dt.timezone.utc).isoformat(timespec='seconds')}",
              f"- hardware: {hw.name} ({hw.hardware_id}), shared with other jobs (the figures do not depend on load)",
              f"- versions: {', '.join(f'{k} {v}' for k, v in versions().items())}",
              f"- wall time so far: {seconds:.0f} s", ""]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"kv-heldout-{args.model}-270m-{hw.hardware_id}" if args.model == "gemma-3" else \
        f"kv-heldout-{args.model}-{hw.hardware_id}"
    (out / f"{stem}.md").write_text("\n".join(lines))
    (out / "raw").mkdir(exist_ok=True)
    (out / "raw" / f"{stem}.json").write_text(json.dumps({"command": command.strip(), "commit": commit, "rows": rows,
                                                  "fits": fits, "calibration": calib, "hardware": hw.to_dict(),
                                                  "versions": versions()}) + "\n")
    print(f"wrote {out / stem}.md", flush=True)


if __name__ == "__main__":
    main()
