"""The prepared GPU check behind ``benchmarks/gpu_check.py``: plan, preflight, rows, profile, scores, report."""
