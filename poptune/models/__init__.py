"""Model loading: registered names (resolved once: :class:`ResolvedModel`), the embedded Gemma-3-270M, tiny random
configs, image prompts for VLMs; a loaded model's LM head takes a few rows' product its CPU's faster way (``head``)."""

from poptune.models.registry import (
                       ModelSpec,
                       load_model,
                       load_tokenizer,
                       max_positions,
                       model_names,
                       resolve_model,
                       weights_fingerprint,
)
from poptune.models.resolved import ResolvedModel
from poptune.models.vision import (
                       ImageSize,
                       image_prompt,
                       image_token_counts,
                       parse_image_sizes,
                       synthetic_image,
                       vision_family,
)

__all__ = [
    "ImageSize",
    "ModelSpec",
    "ResolvedModel",
    "image_prompt",
    "image_token_counts",
    "load_model",
    "load_tokenizer",
    "max_positions",
    "model_names",
    "parse_image_sizes",
    "resolve_model",
    "synthetic_image",
    "vision_family",
    "weights_fingerprint",
]
