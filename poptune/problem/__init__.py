"""The tuning problem without Optuna: what a study and an environment measure, and the space they search.

- :mod:`~poptune.problem.problem`: a tuning problem (model x workload x lengths x objectives) and its reward.
- :mod:`~poptune.problem.space`: POP's configuration space, defined once (the study's distributions, the
  environment's action space, the enqueue checks).
- :mod:`~poptune.problem.evaluator`: the one place that measures a configuration (latency, then accuracy).
- :mod:`~poptune.problem.presets`: study sizes by name.
- :mod:`~poptune.problem.grid`: a measured grid as a CSV table; :mod:`~poptune.problem.replay`: a stored study or
  a grid file answering configurations without a model.

The Optuna study (:mod:`poptune.tune`) and the Gymnasium environments (:mod:`poptune.env`) both stand on this
floor and neither imports the other. Importing this package imports none of its modules; import the one you need.
"""

#: The package's modules (its API: import the one you need; importing the package imports none of them).
__all__ = ["evaluator", "grid", "presets", "problem", "replay", "runtime", "space", "vllm_runtime"]
