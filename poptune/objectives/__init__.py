"""A study's objectives by name: what each one is, which way it is better, how it is read and shown.

- :mod:`~poptune.objectives.base`: an objective (:class:`~poptune.objectives.base.Objective`) and the study's
  reference figures it may be read against (:class:`~poptune.objectives.base.References`).
- one module per objective (:mod:`~poptune.objectives.ttft`, :mod:`~poptune.objectives.accuracy`, ... : those
  the registry lists), each filling in the whole contract: what it asks of the problem, its reference from a
  measurement, how a measurement is read against it, its column.
- :mod:`~poptune.objectives.registry`: the registry (one line per objective) and everything that iterates over
  it: a study's directions and metric names, what a problem must give, the references a measurement gives, its
  values from a measurement, values by name, and the one Pareto dominance.

Adding an objective is one new module here and one line in the registry. Importing this package imports none of
its modules.
"""

#: The package's modules (its API: import the one you need; importing the package imports none of them).
__all__ = ["accuracy", "base", "energy", "kv_bytes", "registry", "tpot", "ttft"]
