"""Fidelity of a POP configuration to the full model on plain text.

Text is cut into (context, continuation) pairs; the context is a prompt (POP prefill), the continuation is
scored at full depth from its cache (:mod:`poptune.evaluate.scoring`). Against the full model on the same
pairs we report the continuation's NLL and perplexity, the top-1 agreement of next-token predictions, and the
mean KL divergence KL(full || POP), overall and per decode position (position 0 is the first token after the
prompt, the one boundary handling protects).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from poptune.data import wikitext_path
from poptune.engine import PopConfig, apply_pop, remove_pop
from poptune.errors import ConfigError
from poptune.evaluate.scoring import continuation_logprobs

__all__ = [
    "FidelitySpec",
    "FidelityResult",
    "fidelity_pairs",
    "wikitext",
    "generated_text",
    "measure_fidelity",
    "summarise",
]


@dataclass(frozen=True)
class FidelitySpec:
    """How to cut text into pairs.

    Attributes:
        context_tokens: Prompt length of each pair.
        continuation_tokens: Scored tokens after it.
        pairs: Number of pairs, taken at evenly spaced offsets of the text (the same pairs every run).
    """

    context_tokens: int = 256
    continuation_tokens: int = 32
    pairs: int = 16

    def __post_init__(self) -> None:
        for name in ("context_tokens", "continuation_tokens", "pairs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"`{name}` must be a positive integer, got {value!r}")


@dataclass
class FidelityResult:
    """Per-position and mean fidelity figures of one configuration against the full model."""

    config: dict[str, Any]
    pairs: int
    nll_full: float
    nll_pop: float
    top1_agreement: float
    kl: float
    per_position: dict[str, list[float]]
    source: str

    @property
    def ppl_full(self) -> float:
        return math.exp(self.nll_full)

    @property
    def ppl_pop(self) -> float:
        return math.exp(self.nll_pop)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ppl_full": self.ppl_full, "ppl_pop": self.ppl_pop}


def wikitext(data_dir: str | Path) -> str:
    """The WikiText-2 test split from a data directory (``wikitext-2/test.txt``)."""
    return wikitext_path(data_dir).read_text(encoding="utf-8")


def generated_text(model: Any, tokenizer: Any, tokens: int, *, seed: int = 0) -> str:
    """Text sampled from the full model itself, for fidelity without any data (seeded, temperature 1)."""
    starts = ["The history of", "In the morning,", "Scientists have found", "The city council"]
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        pieces = []
        for start in starts:
            inputs = tokenizer([start], return_tensors="pt").to(model.device)
            with torch.inference_mode():
                out = model.generate(
                    **inputs, max_new_tokens=tokens // len(starts) + 1, do_sample=True, top_k=0, top_p=1.0
                )
            pieces.append(tokenizer.decode(out[0], skip_special_tokens=True))
    finally:
        torch.random.set_rng_state(generator_state)
    return "\n\n".join(pieces)


def fidelity_pairs(tokenizer: Any, text: str, spec: FidelitySpec) -> list[tuple[list[int], list[int]]]:
    """(context, continuation) token-id pairs at evenly spaced offsets of ``text``."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    window = spec.context_tokens + spec.continuation_tokens
    if len(ids) < window:
        raise ConfigError(f"the text has {len(ids)} tokens, fewer than one pair needs ({window})")
    bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    last_start = len(ids) - window
    starts = sorted({round(i * last_start / max(spec.pairs - 1, 1)) for i in range(spec.pairs)})
    pairs = []
    for start in starts:
        context = bos + ids[start : start + spec.context_tokens]
        pairs.append((context, ids[start + spec.context_tokens : start + window]))
    return pairs


def measure_fidelity(
    model: Any,
    tokenizer: Any,
    config: PopConfig,
    pairs: list[tuple[list[int], list[int]]],
    *,
    batch_size: int = 4,
    source: str = "",
    prefill_chunk: int | None = None,
) -> FidelityResult:
    """Compare POP with ``config`` to the full model on ``pairs`` (contexts prefilled in chunks of
    ``prefill_chunk`` tokens if given); the model is left without POP."""
    fulls, pops, continuations = [], [], []
    pad_id = tokenizer.pad_token_id
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start : start + batch_size]
        contexts, conts = [c for c, _ in chunk], [c for _, c in chunk]
        remove_pop(model)
        fulls += continuation_logprobs(model, contexts, conts, pad_id=pad_id, prefill_chunk=prefill_chunk)
        apply_pop(model, config)
        try:
            pops += continuation_logprobs(model, contexts, conts, pad_id=pad_id, prefill_chunk=prefill_chunk)
        finally:
            remove_pop(model)
        continuations += conts
    return summarise(config, continuations, fulls, pops, source=source)


def summarise(
    config: PopConfig,
    continuations: list[list[int]],
    full: list[torch.Tensor],
    pop: list[torch.Tensor],
    *,
    source: str = "",
) -> FidelityResult:
    """Fidelity from the log-probabilities (m, V) the full model and POP give each continuation (equal lengths)."""
    length = len(continuations[0])
    sums = {key: torch.zeros(length, dtype=torch.float64) for key in ("nll_full", "nll_pop", "agree", "kl")}
    for cont, f, p in zip(continuations, full, pop):  # (m, V) each
        target = torch.tensor(cont).unsqueeze(1)
        sums["nll_full"] -= f.gather(1, target).squeeze(1).double()
        sums["nll_pop"] -= p.gather(1, target).squeeze(1).double()
        sums["agree"] += (f.argmax(-1) == p.argmax(-1)).double()
        sums["kl"] += (f.exp() * (f - p)).sum(-1).double()
    means = {key: (value / len(continuations)).tolist() for key, value in sums.items()}
    return FidelityResult(
        config=config.to_dict(),
        pairs=len(continuations),
        nll_full=sum(means["nll_full"]) / length,
        nll_pop=sum(means["nll_pop"]) / length,
        top1_agreement=sum(means["agree"]) / length,
        kl=sum(means["kl"]) / length,
        per_position={"nll_full": means["nll_full"], "nll_pop": means["nll_pop"], "top1_agreement": means["agree"],
                      "kl": means["kl"]},
        source=source,
    )
