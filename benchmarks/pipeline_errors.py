"""Benchmark: the main command's whole decision path, simulated (issue 86, item 5): error and power as printed.

Each scenario is eight configurations of known truth (true drop, flip rate, speedup) on two tasks' 0/1 items; each
seeded pipeline runs the search's race on every configuration (8 -> 32 items per task), selects the front's
candidate, plans the certification from its search flips (at most 1,024 per task, or what a clock buys) and
certifies on fresh items at the first attempt's 1.25% (:mod:`poptune.tune.pipelinesim`). Per scenario: how often
"certified within" is printed, how often it is wrong (the certified configuration's true drop at or over the 2-point
budget; one-sided binomial check against 1.25%, a row FAILS under p = 0.001), how often a truly-within
configuration is certified, and, where the certified candidate's true drop is 0, the plan's promised power (80%, or
the chance it printed where it bought less) beside the simulated one, with the one-sided binomial p-value of the
simulated count at the mean promise. Then :func:`poptune.tune.certify.accuracy_cost`'s F1 sizing: races of the size
it prints, on F1-like grades, at true drop 0 (its 80% NOT HELD where the p-value of the count under 80% is under
0.001).

Usage::

    python benchmarks/pipeline_errors.py [--pipelines 10000] [--out section.md]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _scenarios() -> list:
    from poptune.tune.pipelinesim import PipelineScenario, Truth

    speeds = [1.50, 1.45, 1.40, 1.35, 1.30, 1.25, 1.20, 1.15]

    def of(drops: list[float], flips: list[float]) -> tuple:
        return tuple(Truth(d, f, s) for d, f, s in zip(drops, flips, speeds))

    typical = of([8, 4, 0, 0, 0, 0, 0, 0], [0.10, 0.06] + [0.045] * 6)
    return [
        PipelineScenario("all eight at the budget (drop 2, 5% flips)", of([2] * 8, [0.05] * 8)),
        PipelineScenario("the four fastest at the budget (drop 2, 5% flips), four at 0 (4.5%)",
                         of([2] * 4 + [0] * 4, [0.05] * 4 + [0.045] * 4)),
        PipelineScenario("mixed: drops 6, 4, 2, 2, 1, 0, 0, 0 (flips 7, 5, 5, 5, 5, 4.5, 4.5, 4.5%)",
                         of([6, 4, 2, 2, 1, 0, 0, 0], [0.07, 0.05, 0.05, 0.05, 0.05, 0.045, 0.045, 0.045])),
        PipelineScenario("all eight at 0 (flips 3.7% to 10%)", of([0] * 8, [0.10, 0.08, 0.06, 0.037] * 2)),
        PipelineScenario("two beyond (8 and 4), six at 0 (4.5%)", typical),
        PipelineScenario("two beyond, six at 0; a clock buys 372 per task", typical, supply=372),
    ]


def _ci(k: int, n: int) -> str:
    """``p% [lo, hi]``: the share and its exact (Clopper-Pearson) 95% interval."""
    from scipy.stats import beta

    lo = beta.ppf(0.025, k, n - k + 1) if k else 0.0
    hi = beta.ppf(0.975, k + 1, n - k) if k < n else 1.0
    return f"{100 * k / n:.2f}% [{100 * lo:.2f}, {100 * hi:.2f}]" if n else "-"


def _promise_rows(label: str, r) -> list[str]:
    """The power at true drop 0 by the certified candidate's true flip rate and whether its plan bought the verdict
    (promised 80%) or not (promised its printed chance), each with the one-sided p-value of falling short."""
    from scipy.stats import binom

    lines = []
    for (flips, bought), (n, k, said) in sorted(r.at_zero.items(), key=lambda x: (not x[0][1], x[0][0])):
        p = binom.cdf(k, n, said / n)
        lines.append(f"| {label} | {100 * flips:g}% | {'bought its verdict' if bought else 'bought less'} | {n:,} | "
                     f"{100 * said / n:.1f}% | {_ci(k, n)} | {p:.3g} | {'held' if p >= 0.001 else 'NOT HELD'} |")
    return lines


def pipeline_rows(pipelines: int) -> tuple[list[str], int, list[str]]:
    from scipy.stats import binom

    from poptune.evaluate.vectorsim import binomial_check
    from poptune.tune.certify import attempt_error
    from poptune.tune.pipelinesim import simulate_pipelines

    level = attempt_error(1)
    lines = ["| scenario | seed | pipelines | certified within | wrong (true drop >= 2) | binomial p (wrong > 1.25%) | "
             "check | a truly-within config certified | candidate at true drop 0: plan's promise | simulated | "
             "binomial p (simulated < promise) | flip rate planned (one added) / seen / true | planned per task | "
             "passed over |", "|" + "---|" * 14]
    failed = 0
    promises = ["| scenario | candidate's true flip rate | plan | studies | promised | certified within | "
                "binomial p (under the promise) | promise |", "|" + "---|" * 8]
    for seed, scenario in enumerate(_scenarios(), start=86_101):
        r = simulate_pipelines(scenario, pipelines=pipelines, seed=seed)
        promises += _promise_rows(scenario.label, r)
        p = binomial_check(r.wrong, r.pipelines, level)
        failed += p < 0.001
        certified = max(r.candidates, 1)
        promise = f"{100 * r.promised / r.zero:.1f}%" if r.zero else "-"
        short = f"{binom.cdf(r.zero_within, r.zero, r.promised / r.zero):.3g}" if r.zero else "-"
        lines.append(f"| {scenario.label} | {seed} | {r.pipelines:,} | {_ci(r.within, r.pipelines)} | "
                     f"{_ci(r.wrong, r.pipelines)} | {p:.3g} | {'ok' if p >= 0.001 else 'FAILS'} | "
                     f"{_ci(r.right, r.pipelines)} | {promise} ({r.zero:,}) | {_ci(r.zero_within, r.zero)} | {short} | "
                     f"{100 * r.seen_rate / certified:.2f}% / {100 * r.raw_rate / certified:.2f}% / "
                     f"{100 * r.true_rate / certified:.2f}% | "
                     f"{r.planned / certified:.0f} | {r.passed_over:,} |")
        print(lines[-1], file=sys.stderr, flush=True)
    return lines, failed, promises


def f1_rows(replicates: int, races: int) -> list[str]:
    from scipy.stats import binom

    from poptune.tune.pipelinesim import F1Grades, accuracy_cost_power

    lines = ["| grades | graded items sized from | seed | sizings x races | items sized (median [min, max]) | "
             "certified within at true drop 0 | binomial p (under the 80% promised) | promise |", "|" + "---|" * 8]
    seed = 86_200
    for grades in (F1Grades("F1-like: 30% zero, 40% one, 30% partial; 37% of items regraded", 0.3, 0.4, 0.37),
                   F1Grades("F1-like: 30% zero, 40% one, 30% partial; 10% of items regraded", 0.3, 0.4, 0.10)):
        for graded, reps, each in ((256, replicates, races), (100_000, 1, races * replicates)):
            seed += 1
            sizes, share = accuracy_cost_power(grades, graded=graded, replicates=reps, races=each, seed=seed)
            n = reps * each
            k = round(share * n)
            p = binom.cdf(k, n, 0.8)
            lines.append(f"| {grades.label} | {graded:,} | {seed} | {reps:,} x {each:,} | "
                         f"{statistics.median(sizes):,.0f} [{min(sizes):,}, {max(sizes):,}] | "
                         f"{_ci(k, n)} | {p:.3g} | {'held' if p >= 0.001 else 'NOT HELD'} |")
            print(lines[-1], file=sys.stderr, flush=True)
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipelines", type=int, default=10_000)
    parser.add_argument("--f1-replicates", type=int, default=200, help="accuracy_cost sizings per F1 row")
    parser.add_argument("--f1-races", type=int, default=50, help="races per sizing")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    started = time.time()
    lines, failed, promises = pipeline_rows(args.pipelines)
    lines += ["", f"{failed} of {len(lines) - 2} rows fail the level; {time.time() - started:.0f} s", ""]
    lines += [*promises, ""]
    lines += f1_rows(args.f1_replicates, args.f1_races)
    lines += ["", f"{time.time() - started:.0f} s in all"]
    text = "\n".join(lines) + "\n"
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    print(text)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
