"""Model loading: registered names, the embedded Gemma-3-270M, tiny random configs."""

from .registry import ModelSpec, load_model, model_names, resolve_model, weights_fingerprint

__all__ = ["ModelSpec", "load_model", "model_names", "resolve_model", "weights_fingerprint"]
