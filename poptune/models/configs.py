"""Model configurations poptune knows by name: full-size published shapes and tiny random test shapes.

Full-size configs let ``weights="random"`` build any registered architecture for latency work where the real
weights are not available (timing does not depend on weight values). Tiny configs (>= 6 layers, a byte-level
vocabulary) make unit tests take seconds; ``tiny-gemma3`` mixes sliding and full attention layers with a small
window so that prompts cross it; ``tiny-qwen3-vl`` and ``tiny-gemma3-vl`` add small vision towers whose image
tokens use the tiny tokenizer's vision ids (260-263).
"""

from __future__ import annotations

from typing import Any

__all__ = ["full_config", "tiny_config", "TINY_VOCAB_SIZE"]

#: Byte-level vocabulary of the tiny tokenizer: 256 bytes, 4 control tokens, 4 vision tokens (see tokenizer.py).
TINY_VOCAB_SIZE = 264

_GEMMA3_PATTERN = 6  # five sliding-window layers, then one global layer


def _gemma3_layer_types(num_layers: int, pattern: int = _GEMMA3_PATTERN) -> list[str]:
    return ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(num_layers)]


def _gemma3_text(
    hidden: int, intermediate: int, layers: int, heads: int, kv_heads: int, window: int, **extra: Any
) -> dict[str, Any]:
    return dict(
        model_type="gemma3_text",
        architectures=["Gemma3ForCausalLM"],
        vocab_size=262_144,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=256,
        query_pre_attn_scalar=256,
        sliding_window=window,
        layer_types=_gemma3_layer_types(layers),
        max_position_embeddings=32_768,
        rms_norm_eps=1e-6,
        bos_token_id=2,
        eos_token_id=1,
        pad_token_id=0,
        **extra,
    )


def _gemma3_vlm(text: dict[str, Any], vision: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A ``Gemma3ForConditionalGeneration`` config around a text stack made by :func:`_gemma3_text`."""
    text = {k: v for k, v in text.items() if k != "architectures"}
    return dict(model_type="gemma3", architectures=["Gemma3ForConditionalGeneration"], text_config=text,
                vision_config=dict(model_type="siglip_vision_model", vision_use_head=False, **vision), **extra)


# SigLIP-So400m at 896 pixels, 14-pixel patches, pooled to 256 tokens per image (Gemma-3 4B and 12B).
_GEMMA3_SIGLIP = dict(hidden_size=1152, intermediate_size=4304, num_hidden_layers=27, num_attention_heads=16,
                      image_size=896, patch_size=14)
_GEMMA3_GLOBAL_ROPE = {
    "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1_000_000.0},
    "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
}
_GEMMA3_IMAGE_TOKENS = dict(mm_tokens_per_image=256, boi_token_index=255_999, eoi_token_index=256_000,
                            image_token_index=262_144)

# Published shapes (config.json of each hub checkpoint). Gemma-3 4B and 12B are vision-language models
# (Gemma3ForConditionalGeneration, text vocabulary 262,208 with the image token); 270M and 1B are text-only.
_FULL: dict[str, dict[str, Any]] = {
    "gemma-3-270m": _gemma3_text(640, 2048, 18, 4, 1, 512, tie_word_embeddings=True),
    "gemma-3-1b": _gemma3_text(1152, 6912, 26, 4, 1, 512, tie_word_embeddings=True),
    "gemma-3-4b": _gemma3_vlm(
        _gemma3_text(2560, 10240, 34, 8, 4, 1024, rope_parameters=_GEMMA3_GLOBAL_ROPE) | {"vocab_size": 262_208},
        _GEMMA3_SIGLIP,
        **_GEMMA3_IMAGE_TOKENS,
    ),
    "gemma-3-12b": _gemma3_vlm(
        _gemma3_text(3840, 15360, 48, 16, 8, 1024, rope_parameters=_GEMMA3_GLOBAL_ROPE) | {"vocab_size": 262_208},
        _GEMMA3_SIGLIP,
        **_GEMMA3_IMAGE_TOKENS,
    ),
    "llama-3.1": dict(
        model_type="llama",
        architectures=["LlamaForCausalLM"],
        vocab_size=128_256,
        hidden_size=4096,
        intermediate_size=14_336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        max_position_embeddings=131_072,
        rms_norm_eps=1e-5,
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 500_000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        bos_token_id=128_000,
        eos_token_id=128_009,
        tie_word_embeddings=False,
    ),
    "qwen3": dict(
        model_type="qwen3",
        architectures=["Qwen3ForCausalLM"],
        vocab_size=151_936,
        hidden_size=4096,
        intermediate_size=12_288,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=40_960,
        rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
        bos_token_id=151_643,
        eos_token_id=151_645,
        tie_word_embeddings=False,
    ),
    "qwen3-vl": dict(
        model_type="qwen3_vl",
        architectures=["Qwen3VLForConditionalGeneration"],
        image_token_id=151_655,
        video_token_id=151_656,
        vision_start_token_id=151_652,
        vision_end_token_id=151_653,
        tie_word_embeddings=False,
        text_config=dict(
            vocab_size=151_936,
            hidden_size=4096,
            intermediate_size=12_288,
            num_hidden_layers=36,
            num_attention_heads=32,
            num_key_value_heads=8,
            head_dim=128,
            max_position_embeddings=262_144,
            rms_norm_eps=1e-6,
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 5_000_000.0,
                "mrope_section": [24, 20, 20],
                "mrope_interleaved": True,
            },
        ),
        vision_config=dict(
            depth=27,
            hidden_size=1152,
            intermediate_size=4304,
            num_heads=16,
            patch_size=16,
            spatial_merge_size=2,
            temporal_patch_size=2,
            out_hidden_size=4096,
            num_position_embeddings=2304,
            deepstack_visual_indexes=[8, 16, 24],
        ),
    ),
}

_TINY_COMMON = dict(
    vocab_size=TINY_VOCAB_SIZE,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=6,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=4096,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
    tie_word_embeddings=False,
)

_TINY: dict[str, dict[str, Any]] = {
    "tiny-llama": dict(model_type="llama", architectures=["LlamaForCausalLM"], **_TINY_COMMON),
    "tiny-qwen3": dict(model_type="qwen3", architectures=["Qwen3ForCausalLM"], **_TINY_COMMON),
    "tiny-gemma3": dict(
        model_type="gemma3_text",
        architectures=["Gemma3ForCausalLM"],
        query_pre_attn_scalar=16,
        sliding_window=8,
        # Pattern 3 gives two global layers in six, one of them inside any deep skipped block.
        layer_types=_gemma3_layer_types(6, pattern=3),
        **_TINY_COMMON,
    ),
    "tiny-qwen3-vl": dict(
        model_type="qwen3_vl",
        architectures=["Qwen3VLForConditionalGeneration"],
        image_token_id=260,
        video_token_id=261,
        vision_start_token_id=262,
        vision_end_token_id=263,
        tie_word_embeddings=False,
        text_config=dict(
            _TINY_COMMON,
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 10_000.0,
                "mrope_section": [4, 2, 2],
                "mrope_interleaved": True,
            },
        ),
        vision_config=dict(
            depth=2,
            hidden_size=32,
            intermediate_size=64,
            num_heads=2,
            patch_size=8,
            spatial_merge_size=2,
            temporal_patch_size=2,
            out_hidden_size=64,
            num_position_embeddings=64,
            # Two deepstack injections, after decoder layers 0 and 1: skip=5 puts the second one inside the
            # skipped block (the 8B model's three, after layers 0-2, are reached from skip=34 on).
            deepstack_visual_indexes=[0, 1],
        ),
    ),
    # A 56x56 SigLIP tower with 7-pixel patches (8x8) pooled to 16 tokens per image: longer than the text
    # stack's sliding window of 8, so the bidirectional image mask and the window meet inside one image.
    "tiny-gemma3-vl": _gemma3_vlm(
        dict(
            model_type="gemma3_text",
            query_pre_attn_scalar=16,
            sliding_window=8,
            layer_types=_gemma3_layer_types(6, pattern=3),
            **_TINY_COMMON,
        ),
        dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=56,
             patch_size=7),
        mm_tokens_per_image=16,
        image_token_index=260,
        boi_token_index=262,
        eoi_token_index=263,
        tie_word_embeddings=False,
    ),
}


def full_config(name: str) -> dict[str, Any] | None:
    """The published full-size config of a registered model, or None if poptune has none for it."""
    config = _FULL.get(name)
    return None if config is None else _deep_copy(config)


def tiny_config(name: str) -> dict[str, Any] | None:
    """The tiny random-weight test config of ``name`` (``tiny-llama``, ...), or None."""
    config = _TINY.get(name)
    return None if config is None else _deep_copy(config)


def tiny_names() -> tuple[str, ...]:
    return tuple(_TINY)


def full_names() -> tuple[str, ...]:
    return tuple(_FULL)


def _deep_copy(config: dict[str, Any]) -> dict[str, Any]:
    import copy

    return copy.deepcopy(config)
