"""poptune: benchmark and auto-tuning suite for Prefill-Only Pruning (POP) of LLMs and VLMs."""

from .engine import BOUNDARIES, PopConfig, PopHandle, apply_pop, get_pop_config, remove_pop
from .errors import (
    ConfigError,
    DataError,
    DeviceError,
    MeasurementError,
    ModelNotFoundError,
    PoptuneError,
    UnsupportedModelError,
)
from .export import load_config
from .models import ModelSpec, load_model, model_names, resolve_model

__version__ = "0.1.0"

__all__ = [
    "BOUNDARIES",
    "ConfigError",
    "DataError",
    "DeviceError",
    "MeasurementError",
    "ModelNotFoundError",
    "ModelSpec",
    "PopConfig",
    "PopHandle",
    "PoptuneError",
    "UnsupportedModelError",
    "apply_pop",
    "get_pop_config",
    "load_config",
    "load_model",
    "model_names",
    "remove_pop",
    "resolve_model",
]
