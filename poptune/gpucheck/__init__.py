"""The prepared GPU check behind ``poptune gpu-check``: plan, preflight, rows, profile, scores, report, and
:mod:`~poptune.gpucheck.check` running them in one time budget."""

#: The package's modules (its API: import the one you need; importing the package imports none of them).
__all__ = ["check", "dryrun", "plan", "preflight", "profile", "report", "rows", "scores"]
