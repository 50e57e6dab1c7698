"""Write the fixture study (a synthetic study in a journal file) and the golden renderings of the report.

The golden files are what ``poptune study`` printed and wrote for these studies at commit ca4c9a0 (before the
report model): ``tests/reports/test_golden.py`` checks that the report still renders them byte for byte.
Run from the repository root: ``python -m tests.reports.golden.make_golden [--study]`` (``--study`` makes the
fixture study again first: new dates, so new golden files).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def make_study() -> None:
    import optuna

    import poptune.tune.trust as trust
    from poptune.env import TuningProblem
    from poptune.tune.study import StudySpec, run_study
    from tests.tune.fakes import FakeEvaluator, ideal, pair, true

    def timed(evaluator, config, pairs, warmup, lengths=None):
        return {16: (pair([true(config) * (1 + 0.001 * (i % 3 - 1)) for i in range(pairs)]), ideal(config))}

    trust._time = timed
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    path = HERE / "fake-study.journal"
    path.unlink(missing_ok=True)
    problem = TuningProblem(model="tiny-llama", tasks=("piqa",), lengths=(16,), decode_tokens=8, max_drop=1.5)
    spec = StudySpec(problem=problem, trials=8, sampler="grid", storage=f"journal:{path}", study="fake",
                     sole_worker=True)
    run_study(spec, evaluator=FakeEvaluator(problem))


def main() -> None:
    from tests.reports.test_golden import STUDIES, render

    if "--study" in sys.argv:
        make_study()
    for name, journal in STUDIES.items():
        if journal.exists():
            for suffix, text in render(journal, Path("/tmp/poptune-golden")).items():
                (HERE / f"{name}.{suffix}").write_text(text)


if __name__ == "__main__":
    main()
