"""The tuner: the Optuna study over POP's space, its samplers, trust checks, certification, workers and replay.

What it searches and measures is the Optuna-free problem below it (:mod:`poptune.problem`: the tuning problem,
the configuration space, the evaluator); what it optimises, the study's objectives (:mod:`poptune.objectives`).

- :mod:`~poptune.tune.study`: the Optuna study itself; :mod:`~poptune.tune.resume`: what resuming a stored one
  refuses; :mod:`~poptune.tune.objective`: one trial; :mod:`~poptune.tune.workers`: one worker per GPU.
- :mod:`~poptune.tune.samplers`, :mod:`~poptune.tune.structured`: samplers by name, the structure-aware one.
- :mod:`~poptune.tune.trust`, :mod:`~poptune.tune.certify`, :mod:`~poptune.tune.interrupt`: what a study
  relies on: trustworthy latencies, verdicts on fresh items, clean interruption.
- :mod:`~poptune.tune.efficiency`: how fast each sampler finds good configurations on a replayed grid study.

Importing this package imports none of its modules; import the one you need.
"""

#: The package's modules (its API: import the one you need; importing the package imports none of them).
__all__ = [
    "baseline_trials", "batch", "certify", "efficiency", "gridstudy", "interrupt", "objective", "params",
    "pipelinesim", "resume", "samplers", "simulate", "structured", "study", "trust", "workers"
]
