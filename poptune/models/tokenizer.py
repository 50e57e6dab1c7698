"""A byte-level tokenizer built in code, for the tiny random models (no files, no hub)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

__all__ = ["byte_tokenizer"]

# Ids 0-3 are control tokens, 4-259 the 256 bytes, 260-263 the vision tokens of the tiny VLM configs.
_CONTROL = ["<pad>", "<bos>", "<eos>", "<unk>"]
_VISION = ["<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>"]


def byte_tokenizer() -> "PreTrainedTokenizerFast":
    """A left-padding byte-level tokenizer that prepends ``<bos>``, with vocabulary size 264."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    alphabet = [ch for _, ch in sorted(_bytes_to_unicode().items())]
    vocab = {token: i for i, token in enumerate(_CONTROL)}
    vocab.update({ch: len(_CONTROL) + i for i, ch in enumerate(alphabet)})
    vocab.update({token: len(vocab) + i for i, token in enumerate(_VISION)})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", vocab["<bos>"])]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        bos_token="<bos>",
        eos_token="<eos>",
        unk_token="<unk>",
        additional_special_tokens=_VISION,
        padding_side="left",
    )
    fast.image_token = "<|image_pad|>"
    return fast


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from the 256 bytes to printable characters (what ByteLevel emits)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = list(printable)
    shift = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + shift)
            shift += 1
    return {byte: chr(ch) for byte, ch in zip(printable, chars)}
