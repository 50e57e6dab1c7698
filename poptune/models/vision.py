"""Image prompts for the vision-language models poptune knows: image sizes, a local image processor, inputs.

Qwen3-VL and Gemma-3 (``Gemma3ForConditionalGeneration``) take an image as ``pixel_values`` plus placeholder
tokens in ``input_ids`` that the vision encoder's output replaces. The image processor is built in code from
the model's own config with the published preprocessing (PIL and numpy backends of transformers: no
torchvision, no downloads), so ``weights="random"`` and the tiny test models get exactly the inputs the real
processor would give for the same image:

- Qwen3-VL: resize to multiples of ``patch_size * spatial_merge_size`` (32 pixels for the 8B model) within
  [64, 16384] image tokens (the 8B processor's 65,536 to 16,777,216 pixels), mean and std 0.5;
  one image token per merged 2x2 patch, so the token count grows with the resolution.
- Gemma-3: resize to the vision tower's square input (896 pixels for 4B/12B), mean and std 0.5; always
  ``mm_tokens_per_image`` tokens (256), whatever the resolution (pan-and-scan off, as by default).

A prompt row is ``[bos] <image start> <image tokens> <image end> text``; rows of a batch are left-padded.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from poptune.errors import ConfigError

if TYPE_CHECKING:
    import torch
    from PIL import Image

__all__ = [
    "ImageSize",
    "parse_image_sizes",
    "vision_family",
    "require_vision",
    "check_takes_images",
    "image_processor",
    "synthetic_image",
    "image_prompt",
    "image_token_counts",
    "decode_position_ids",
    "encoder_patches",
    "kept_rope_state",
]

#: Model classes with an image path, by family.
_FAMILIES = {"Qwen3VLForConditionalGeneration": "qwen3_vl", "Gemma3ForConditionalGeneration": "gemma3"}

_SIZE = re.compile(r"^\s*([1-9][0-9]*)\s*[xX]\s*([1-9][0-9]*)\s*$")

#: Largest side accepted (a 16384-pixel side is already far past any processor's pixel budget).
MAX_SIDE = 16_384

# Qwen3-VL-8B's processor bounds in pixels (65,536 and 16,777,216 with 32-pixel merged patches), as tokens.
_QWEN_MIN_TOKENS, _QWEN_MAX_TOKENS = 64, 16_384


@dataclass(frozen=True)
class ImageSize:
    """An image resolution in pixels (width x height, as ``640x480`` is usually written)."""

    width: int
    height: int

    def __post_init__(self) -> None:
        for name in ("width", "height"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SIDE:
                raise ConfigError(f"image `{name}` must be an integer in [1, {MAX_SIDE}], got {value!r}")
        if max(self.width, self.height) / min(self.width, self.height) > 200:
            raise ConfigError(f"image {self} is too elongated: the aspect ratio must be at most 200")

    @classmethod
    def parse(cls, text: str) -> "ImageSize":
        """``"640x480"`` -> ``ImageSize(640, 480)``, or a one-line :class:`ConfigError`."""
        match = _SIZE.match(text) if isinstance(text, str) else None
        if match is None:
            raise ConfigError(f"an image size must be WIDTHxHEIGHT in pixels (e.g. 640x480), got {text!r}")
        return cls(int(match.group(1)), int(match.group(2)))

    def __str__(self) -> str:
        return f"{self.width}x{self.height}"


def parse_image_sizes(text: str, option: str = "--image") -> tuple[ImageSize, ...]:
    """``"640x480,1280x720"`` -> two sizes; a malformed list is a one-line :class:`ConfigError` naming ``option``."""
    parts = [part for part in text.split(",") if part.strip()] if isinstance(text, str) else []
    if not parts:
        raise ConfigError(f"`{option}` must name at least one WIDTHxHEIGHT image size (e.g. 640x480), got {text!r}")
    try:
        return tuple(ImageSize.parse(part) for part in parts)
    except ConfigError as e:
        raise ConfigError(f"`{option}`: {e}") from e


def vision_family(model: Any) -> str | None:
    """``qwen3_vl`` or ``gemma3`` for a vision-language model poptune can prompt with images, else None."""
    return _FAMILIES.get(type(model).__name__)


def require_vision(model: Any, name: str) -> str:
    """The family of ``model``, or a :class:`ConfigError` saying that ``name`` takes no images."""
    family = vision_family(model)
    if family is None:
        raise _text_only(name, type(model).__name__)
    return family


def check_takes_images(name: str) -> None:
    """Fail before any loading when poptune knows the architecture of ``name`` and it takes no images.

    Hub and local models whose config poptune does not hold are checked by :func:`require_vision` once loaded.
    """
    from poptune.models import configs
    from poptune.models.registry import resolve_model

    spec = resolve_model(name)
    config = configs.tiny_config(spec.name) or configs.full_config(spec.name)
    architecture = (config or {}).get("architectures", [None])[0]
    if config is not None and architecture not in _FAMILIES:
        raise _text_only(name, architecture)


def _text_only(name: str, architecture: str | None) -> ConfigError:
    return ConfigError(
        f"{name!r} is a text-only model ({architecture}): image prompts need a vision-language model "
        "(qwen3-vl, gemma-3-4b, gemma-3-12b, tiny-qwen3-vl, tiny-gemma3-vl)"
    )


def image_processor(config: Any) -> Any:
    """The image processor of a Qwen3-VL or Gemma-3 VLM ``config`` (PIL backend: no torchvision, no files)."""
    family = config.model_type
    if family not in _FAMILIES.values():
        raise ConfigError(f"no image processor for model type {family!r}")
    vision = config.vision_config
    if family == "qwen3_vl":
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

        factor = vision.patch_size * vision.spatial_merge_size
        return Qwen2VLImageProcessorPil(
            patch_size=vision.patch_size,
            temporal_patch_size=vision.temporal_patch_size,
            merge_size=vision.spatial_merge_size,
            image_mean=[0.5, 0.5, 0.5],
            image_std=[0.5, 0.5, 0.5],
            size={"shortest_edge": _QWEN_MIN_TOKENS * factor**2, "longest_edge": _QWEN_MAX_TOKENS * factor**2},
        )
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

    return Gemma3ImageProcessorPil(
        size={"height": vision.image_size, "width": vision.image_size},
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
        do_pan_and_scan=False,
    )


def synthetic_image(size: ImageSize, seed: int = 0) -> "Image.Image":
    """A seeded RGB image of ``size``: smooth colour gradients plus noise (timing ignores pixel values)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0 : size.height, 0 : size.width]
    base = np.stack([x / max(size.width - 1, 1), y / max(size.height - 1, 1), (x + y) / (size.width + size.height)])
    pixels = 200 * base.transpose(1, 2, 0) + rng.uniform(0, 55, (size.height, size.width, 3))  # (H, W, 3)
    return Image.fromarray(pixels.astype(np.uint8), mode="RGB")


def image_prompt(
    model: Any,
    tokenizer: Any,
    images: "Sequence[Image.Image]",
    texts: Sequence[str],
    *,
    device: "str | torch.device" = "cpu",
) -> dict[str, "torch.Tensor"]:
    """Model inputs for prompts of one image followed by text, one row per image, left-padded.

    Returns ``input_ids``, ``attention_mask`` (B, N), ``pixel_values`` and the family's extras:
    ``image_grid_thw`` and ``mm_token_type_ids`` (Qwen3-VL), ``token_type_ids`` (Gemma-3), 1 at image tokens.

    Raises:
        ConfigError: a text-only model, or as many images as texts not given.
    """
    import torch

    family = require_vision(model, type(model).__name__)
    if len(images) != len(texts) or not images:
        raise ConfigError(f"an image prompt needs one text per image, got {len(images)} images and {len(texts)} texts")
    processed = image_processor(model.config)(images=list(images), return_tensors="pt")
    config = model.config
    if family == "qwen3_vl":
        merge = config.vision_config.spatial_merge_size
        counts = [int(t * h * w) // merge**2 for t, h, w in processed["image_grid_thw"].tolist()]
        start, end = config.vision_start_token_id, config.vision_end_token_id
    else:
        counts = [config.mm_tokens_per_image] * len(images)
        start, end = config.boi_token_id, config.eoi_token_id
    bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    rows = [
        bos + [start] + [config.image_token_id] * count + [end] + tokenizer(text, add_special_tokens=False)["input_ids"]
        for count, text in zip(counts, texts)
    ]
    width = max(map(len, rows))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    input_ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], dtype=torch.long)  # (B, N)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], dtype=torch.long)  # (B, N)
    types = (input_ids == config.image_token_id).long()  # (B, N)
    inputs = {"input_ids": input_ids, "attention_mask": mask, "pixel_values": processed["pixel_values"]}
    if family == "qwen3_vl":
        inputs.update(image_grid_thw=processed["image_grid_thw"], mm_token_type_ids=types)
    else:
        inputs.update(token_type_ids=types)
    dtype = next(model.parameters()).dtype
    return {k: v.to(device, dtype=dtype) if v.is_floating_point() else v.to(device) for k, v in inputs.items()}


def image_token_counts(model: Any, inputs: dict[str, "torch.Tensor"]) -> list[int]:
    """Image placeholder tokens per row of ``inputs`` (the prompt tokens the vision encoder fills)."""
    return (inputs["input_ids"] == model.config.image_token_id).sum(-1).tolist()


def decode_position_ids(
    model: Any, prompt: "dict[str, torch.Tensor]", attention_mask: "torch.Tensor", new: int = 1
) -> "torch.Tensor | None":
    """Position ids of the ``new`` tokens of a forward over the cache of ``prompt`` (a decode step, or a
    continuation scored at once), for forwards outside ``generate``; None where the model derives them itself.

    Qwen3-VL places image tokens on a 2D grid (mRoPE), so text after an image continues from the grid's
    extent, not from the token count: the model keeps that offset (``rope_deltas``) from the prefill of an
    image prompt. transformers 5.24 derives a decode step's positions from the whole attention mask rather than
    from the new token, and keeps a stale offset after a text-only prompt, so a decode loop passes them.

    Args:
        model: The model, right after the prefill of ``prompt`` (its ``rope_deltas`` belong to that prompt).
        prompt: The prefill's inputs (an image prompt has ``image_grid_thw``).
        attention_mask: (B, past + new), the new tokens included.
        new: Tokens in this forward.

    Returns:
        (3, B, new) positions for Qwen3-VL, else None.
    """
    import torch

    if vision_family(model) != "qwen3_vl":
        return None
    batch = attention_mask.shape[0]
    past = attention_mask.shape[1] - new
    if prompt.get("image_grid_thw") is None:  # text only: positions continue from the cache, as in prefill
        text = torch.arange(past, past + new, device=attention_mask.device)
        return text.view(1, 1, new).expand(3, batch, new)
    real = attention_mask.long().cumsum(-1)[:, -new:] - 1  # (B, new): the new tokens' indices among real tokens
    return (real + model.model.rope_deltas.to(real.device)).unsqueeze(0).expand(3, -1, -1)  # (3, B, new)


def encoder_patches(config: Any, inputs: "dict[str, torch.Tensor]") -> int:
    """Patches the vision encoder runs for the first image of ``inputs`` (before any merging or pooling)."""
    if config.model_type == "qwen3_vl":
        t, h, w = inputs["image_grid_thw"][0].tolist()
        return int(t * h * w)
    vision = config.vision_config
    return (vision.image_size // vision.patch_size) ** 2


@contextlib.contextmanager
def kept_rope_state(model: Any) -> Iterator[None]:
    """Restore Qwen3-VL's ``rope_deltas`` after image prompts (a no-op for other models).

    The model keeps the mRoPE offset of its last image prompt, and in transformers 5.24 a later text-only
    forward over a cache (continuation scoring) would pick it up; measuring image prompts leaves it as found.
    """
    inner = getattr(model, "model", None)
    if vision_family(model) != "qwen3_vl" or inner is None:
        yield
        return
    saved = inner.rope_deltas
    try:
        yield
    finally:
        inner.rope_deltas = saved
