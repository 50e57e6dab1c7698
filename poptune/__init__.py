"""poptune: benchmark and auto-tuning suite for Prefill-Only Pruning (POP) of LLMs and VLMs."""

from .baselines import Baseline, LayerRemoval, build_baseline
from .calibration import CalibrationSpec
from .engine import BOUNDARIES, STAGES, PopConfig, PopHandle, apply_pop, get_pop_config, remove_pop, stage
from .errors import (
    ConfigError,
    DataError,
    DeviceError,
    InputError,
    MeasurementError,
    ModelNotFoundError,
    PoptuneError,
    UnsupportedModelError,
)
from .export import load_config
from .models import ImageSize, ModelSpec, image_prompt, load_model, model_names, resolve_model, synthetic_image
from .segments import chunk_bounds, prefill_prompt

__version__ = "0.1.0"

__all__ = [
    "BOUNDARIES",
    "Baseline",
    "CalibrationSpec",
    "ConfigError",
    "DataError",
    "DeviceError",
    "ImageSize",
    "InputError",
    "LayerRemoval",
    "MeasurementError",
    "ModelNotFoundError",
    "ModelSpec",
    "PopConfig",
    "PopHandle",
    "PoptuneError",
    "STAGES",
    "UnsupportedModelError",
    "apply_pop",
    "build_baseline",
    "chunk_bounds",
    "get_pop_config",
    "image_prompt",
    "load_config",
    "load_model",
    "model_names",
    "prefill_prompt",
    "remove_pop",
    "resolve_model",
    "stage",
    "synthetic_image",
]
