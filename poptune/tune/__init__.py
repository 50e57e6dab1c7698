"""The tuner: POP's search space, the tuning problem and its evaluator, the Optuna study, workers, replay.

- :mod:`~poptune.tune.problem`: a tuning problem (model x workload x lengths) and its reward.
- :mod:`~poptune.tune.space`: the search space, one point per configuration.
- :mod:`~poptune.tune.evaluator`: the one place that measures a configuration (latency, then accuracy).
- :mod:`~poptune.tune.trust`, :mod:`~poptune.tune.interrupt`, :mod:`~poptune.tune.presets`: what a study
  relies on: trustworthy latencies, clean interruption, sizes by name.
- :mod:`~poptune.tune.study`: the Optuna study itself; :mod:`~poptune.tune.workers`: one worker per GPU.
- :mod:`~poptune.tune.replay`: how fast each sampler finds good configurations on a replayed grid study.

Importing this package imports none of its modules; import the one you need.
"""
