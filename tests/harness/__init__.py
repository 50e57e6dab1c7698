"""Fault and bad-input harnesses on real processes, importable by the tests and runnable as modules.

``python -m tests.harness.faults`` and ``python -m tests.harness.bad_inputs`` (from the repository root) print
the Markdown tables of ``leaderboards/faults-bad-inputs-tiny-llama-cpu-intel-xeon-processor-2t.md``;
``python -m tests.harness.distributed_study`` runs workers on one study with faults (docs/distributed.md).
``tests/harness/test_*.py`` run them scaled down.
"""
