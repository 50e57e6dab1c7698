"""The prepared GPU check behind ``poptune gpu-check``: plan, preflight, rows, profile, scores, report, and
:mod:`~poptune.gpucheck.check` running them in one time budget."""
