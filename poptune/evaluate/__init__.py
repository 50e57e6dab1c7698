"""Accuracy under POP: stage-aware lm-eval scoring, offline task packs, synthetic context tasks, fidelity."""
