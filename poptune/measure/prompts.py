"""Prompts of exact token lengths made of real text, for timing.

Latency depends on the number of tokens, not on their values, but real token ids keep the measured path the
one users run (tokenizer, embedding rows, no degenerate inputs). The text is public-domain prose (the opening
of Jane Austen's *Pride and Prejudice*, 1813), tiled as needed; each row of a batch starts at another place.
An image prompt is one synthetic image followed by a short question (:data:`IMAGE_QUESTION`).
"""

from __future__ import annotations

from typing import Any

import torch

from poptune.errors import ConfigError

__all__ = ["prompt_batch", "image_prompt_batch", "IMAGE_QUESTION"]

#: The text after the image in a timed image prompt: one short question, as a user would ask.
IMAGE_QUESTION = "What is shown in this image? Answer in one sentence."

_TEXT = (
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in "
    "want of a wife. However little known the feelings or views of such a man may be on his first entering a "
    "neighbourhood, this truth is so well fixed in the minds of the surrounding families, that he is "
    "considered the rightful property of some one or other of their daughters. \"My dear Mr. Bennet,\" said "
    "his lady to him one day, \"have you heard that Netherfield Park is let at last?\" Mr. Bennet replied "
    "that he had not. \"But it is,\" returned she; \"for Mrs. Long has just been here, and she told me all "
    "about it.\" Mr. Bennet made no answer. \"Do you not want to know who has taken it?\" cried his wife "
    "impatiently. \"You want to tell me, and I have no objection to hearing it.\" This was invitation enough. "
    "\"Why, my dear, you must know, Mrs. Long says that Netherfield is taken by a young man of large fortune "
    "from the north of England; that he came down on Monday in a chaise and four to see the place, and was so "
    "much delighted with it, that he agreed with Mr. Morris immediately; that he is to take possession before "
    "Michaelmas, and some of his servants are to be in the house by the end of next week.\" \"What is his "
    "name?\" \"Bingley.\" \"Is he married or single?\" \"Oh! Single, my dear, to be sure! A single man of "
    "large fortune; four or five thousand a year. What a fine thing for our girls!\" \"How so? How can it "
    "affect them?\" \"My dear Mr. Bennet,\" replied his wife, \"how can you be so tiresome! You must know "
    "that I am thinking of his marrying one of them.\" \"Is that his design in settling here?\" \"Design! "
    "Nonsense, how can you talk so! But it is very likely that he may fall in love with one of them, and "
    "therefore you must visit him as soon as he comes.\" "
)


def prompt_batch(tokenizer: Any, length: int, batch_size: int = 1, *, device: Any = "cpu") -> dict[str, torch.Tensor]:
    """``input_ids`` and ``attention_mask`` of shape (batch_size, length) from real text, no padding.

    Raises:
        ConfigError: ``length`` < 2 or ``batch_size`` < 1.
    """
    if length < 2:
        raise ConfigError(f"prompt lengths must be >= 2 tokens, got {length}")
    if batch_size < 1:
        raise ConfigError(f"`batch_size` must be >= 1, got {batch_size}")
    ids = tokenizer(_TEXT, add_special_tokens=False)["input_ids"]
    bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    body = length - len(bos)
    stride = max(len(ids) // max(batch_size, 1), 1)
    rows = []
    for row in range(batch_size):
        start = row * stride
        tiled = (ids * (body // len(ids) + 2))[start : start + body]
        rows.append(bos + tiled)
    input_ids = torch.tensor(rows, dtype=torch.long, device=device)  # (B, length)
    return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}


def image_prompt_batch(
    model: Any, tokenizer: Any, size: Any, batch_size: int = 1, *, device: Any = "cpu"
) -> dict[str, torch.Tensor]:
    """A batch of prompts, each one image of ``size`` (an :class:`~poptune.models.vision.ImageSize`) and
    :data:`IMAGE_QUESTION`. Rows hold other (seeded) pictures of the same size, so they need no padding.

    Raises:
        ConfigError: a text-only model, or ``batch_size`` < 1.
    """
    from poptune.models.vision import image_prompt, synthetic_image

    if batch_size < 1:
        raise ConfigError(f"`batch_size` must be >= 1, got {batch_size}")
    images = [synthetic_image(size, seed=row) for row in range(batch_size)]
    return image_prompt(model, tokenizer, images, [IMAGE_QUESTION] * batch_size, device=device)
