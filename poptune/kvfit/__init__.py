"""K/V work a floor above the engine: calibration text, fitting calibrated K/V maps and checking them, and the
one preparation of a model for a configuration's K/V source.

- ``calibration``: calibration text (WikiText-2 windows or text sampled from the model) and what the model
  computes on it (the baselines use it too);
- ``fit``: fitting a block's calibrated maps in closed form (:class:`~poptune.kvfit.fit.KVFitter`);
- ``check``: the fit's block-level check on held-out windows (a one-sided t-test at a stated level);
- ``prepare``: :func:`~poptune.kvfit.prepare.prepare_kv`, the one preparation path (the CLI's, the tuner's,
  lm-eval's).

The K/V sources themselves -- what each writes for the pruned tokens, its label, what an export carries -- are
:mod:`poptune.kv`, below the engine; fitting runs POP prefills, so it cannot live there.
"""

#: The package's modules (its API: import the one you need; importing the package imports none of them).
__all__ = ["calibration", "check", "fit", "prepare"]
