"""``PopLM``: lm-evaluation-harness's Hugging Face model with POP's stage-aware semantics.

Everything lm-eval does to turn requests into token ids stays ``HFLM``'s (the same tokenizer handling, BOS
rule, and context/continuation split), so with ``skip=0`` the scores equal plain ``HFLM``. What changes is
how a loglikelihood request is scored: the context is a *prompt* -- prefilled with POP under the configured
boundary rule -- and the continuation is scored at full depth from that cache, as decode would see it
(:mod:`poptune.evaluate.scoring`). Requests sharing a context share one prefill. ``generate_until`` uses POP
generation through ``model.generate``. POP is applied to the model only while ``PopLM`` scores or generates: a
model passed in is handed back as it was.

lm-eval 0.4 has no plugin discovery for models: importing this module registers ``poptune`` with its
registry, and ``python -m poptune.evaluate.harness ...`` is ``lm_eval ...`` with it registered.
"""

from __future__ import annotations

import logging
import os
from functools import partial
from typing import Any

from lm_eval.api.registry import register_model
from lm_eval.models.huggingface import HFLM
from tqdm import tqdm

from poptune import progress
from poptune.boundary import registry as boundary_registry
from poptune.engine import apply_pop, decoder_of
from poptune.engine.prefix import attached_states
from poptune.engine.segments import chunk_bounds
from poptune.engine.speculate import generate
from poptune.engine.trunk import Generation, attached_trunk, batch_key
from poptune.errors import ConfigError
from poptune.evaluate.modelargs import pop_config
from poptune.evaluate.scoring import score_continuations
from poptune.kv import registry

__all__ = ["PopLM"]

log = logging.getLogger(__name__)

#: The CUDA devices lm-eval passes when none is given (its command line's default is ``cuda:0``).
_DEFAULT_CUDA = ("cuda", "cuda:0")


def _load(name: str, device: Any, dtype: Any, weights: str) -> tuple[Any, Any]:
    """:func:`poptune.load_model`, with lm-eval's default CUDA device falling back to the CPU where CUDA is absent."""
    import torch

    from poptune.models import load_model

    if str(device) in _DEFAULT_CUDA and not torch.cuda.is_available():
        log.warning("poptune: warning: CUDA is not available on this machine: evaluating on the CPU (give "
                    "--device cpu to silence this)")
        device = "cpu"
    return load_model(name, device=device, dtype=dtype, weights=weights)


@register_model("poptune")
class PopLM(HFLM):
    """An lm-eval ``LM`` that evaluates a model under one POP configuration.

    Args:
        pretrained: A poptune model name (``gemma-3``, ``tiny-llama``, a local directory, ...) or a loaded
            ``PreTrainedModel`` (then pass ``tokenizer``).
        skip, boundary, offset: The :class:`~poptune.engine.PopConfig`; ``skip=0`` is the full model.
        layers: An explicit set of skipped layers (a tuple, or ``"3-5-9"`` from ``--model_args``) instead of the
            final block; ``skip`` then defaults to its size.
        kv: The K/V source (a name of :mod:`poptune.kv.registry`). With a model name the model is prepared for it
            as a study prepares it (:func:`poptune.prepare_kv`: calibrated K/V's maps are read from the poptune
            cache or fitted there first, on WikiText-2 validation text from ``$POPTUNE_DATA``, else text sampled
            from the model); a loaded model must be prepared already (hold the maps).
        device, dtype, weights: As :func:`poptune.load_model` (ignored for a loaded model). lm-eval's default
            device is CUDA: where CUDA is not available, ``cuda`` and ``cuda:0`` fall back to the CPU with one
            warning line, as lm-eval's own Hugging Face model does for a device it does not know.
        batch_size: Contexts prefilled together (left-padded), an integer (lm-eval's ``auto`` is refused).
        prefill_chunk: Prefill contexts in chunks of this many tokens (None: whole); generation too.
        **kwargs: Passed to ``HFLM`` (``max_length``, ``add_bos_token``, ...).

    Raises:
        PoptuneError: a bad argument, a missing model or device (:mod:`poptune.errors`), before any request.

    Example:
        >>> lm = PopLM(pretrained="gemma-3", skip=6, boundary="last")
        >>> lm_eval.evaluator.evaluate(lm, task_dict)
    """

    def __init__(
        self,
        pretrained: Any = "gemma-3",
        skip: int = 0,
        boundary: str = boundary_registry.DEFAULT,
        offset: int = 0,
        layers: tuple[int, ...] | str | None = None,
        kv: str = registry.DEFAULT,
        device: str = "cpu",
        dtype: str | None = None,
        weights: str = "pretrained",
        batch_size: int | str = 8,
        tokenizer: Any = None,
        prefill_chunk: int | None = None,
        **kwargs: Any,
    ) -> None:
        config = pop_config(skip, boundary, offset, layers, kv)
        if not str(batch_size).strip().isdigit() or int(batch_size) < 1:  # lm-eval's "auto" too
            raise ConfigError(f"PopLM batches contexts itself: give `batch_size` as an integer >= 1, "
                              f"got {batch_size!r}")
        if isinstance(pretrained, str):
            name = pretrained
            pretrained, tokenizer = _load(name, device, dtype, weights)
            from poptune.kvfit.prepare import prepare_kv
            from poptune.models import weights_fingerprint

            # The one preparation (a bad block fails before any fit; calibrated maps fitted once per block and
            # kept in the cache, as a study does).
            prepare_kv(pretrained, tokenizer, config, fingerprint=weights_fingerprint(name, weights))
        elif tokenizer is None:
            raise ConfigError("PopLM needs `tokenizer` when given a loaded model")
        chunk_bounds(2, prefill_chunk)  # validates it
        super().__init__(pretrained=pretrained, tokenizer=tokenizer, batch_size=int(batch_size), **kwargs)
        config.check(len(decoder_of(self.model).layers))  # refused before any request, not at the first
        with apply_pop(self.model, config):  # a K/V source the model is not ready for (no maps): refused now too
            pass
        self.pop_config = config
        self.prefill_chunk = prefill_chunk

    @property
    def config_tag(self) -> str:
        """A file-name-safe name of the configuration, e.g. ``pop-skip6-last-off0``."""
        return self.pop_config.tag

    def set_cache_hook(self, cache_hook: Any) -> None:
        """Refuse an lm-eval request cache that another configuration could share.

        lm-eval keys its cache by request text only, so results of one POP configuration would be served to
        another from the same file. Each configuration must use its own cache file, named after it.
        """
        dbdict = getattr(cache_hook, "dbdict", None)
        path = getattr(dbdict, "filename", None)
        if path is not None and self.config_tag not in os.path.basename(str(path)):
            raise ConfigError(
                f"lm-eval's request cache {path} is keyed by request text only and could mix POP "
                f"configurations: use a cache path containing {self.config_tag!r}"
            )
        super().set_cache_hook(cache_hook)

    def get_model_info(self) -> dict:
        return {**super().get_model_info(), "pop_config": self.pop_config.to_dict()}

    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        progress.expect(len(requests))  # advanced per generated batch (:meth:`_model_generate`)
        return super().generate_until(requests, disable_tqdm=disable_tqdm)

    def _model_generate(self, context: Any, max_length: int, stop: list[str], **generation_kwargs: Any) -> Any:
        """HFLM's generation -- greedy unless the task samples -- with POP applied for the call and the prompt
        prefilled in chunks of ``prefill_chunk`` tokens if given.

        With prefix states attached (a study, :mod:`poptune.engine.prefix`), the full model's greedy answers are kept
        and a POP configuration's greedy generation of a single row verifies them as drafts
        (:mod:`poptune.engine.speculate`): the same output, fewer decode steps where the answers agree."""
        from lm_eval.models.utils_hf import stop_sequences_criteria

        attention_mask = generation_kwargs.pop("attention_mask", None)
        temperature = generation_kwargs.pop("temperature", 0.0)
        if temperature == 0.0 and generation_kwargs.get("do_sample") is None:
            generation_kwargs["do_sample"] = False
        if not (temperature == 0.0 and generation_kwargs.get("do_sample") is False):
            generation_kwargs["temperature"] = temperature
        def stopping() -> Any:  # lm-eval's criteria are stateful: a fresh list per generation
            return stop_sequences_criteria(self.tokenizer, stop, context.shape[1], context.shape[0])

        # Drafts only for a single row: a batch keeps only what all its rows accept, and every proposed position
        # pays the LM head, so batched verification cost more than plain decode (leaderboards/item-cost-*).
        states = attached_states(self.model) if context.shape[0] == 1 else None

        inputs = {"input_ids": context, "attention_mask": attention_mask}
        settings = {"max_length": max_length, "pad_token_id": self.tokenizer.pad_token_id, "use_cache": True,
                    **generation_kwargs}

        def compute() -> Any:
            return generate(self.model, inputs, states=states, chunk=self.prefill_chunk, stopping=stopping, **settings)

        key = batch_key(context, attention_mask, max_length, stop, sorted(generation_kwargs.items()),
                        self.prefill_chunk)
        with apply_pop(self.model, self.pop_config):
            out = self._shared(key, compute, Generation(inputs, self.prefill_chunk, stopping, settings))
        progress.advance(int(context.shape[0]))
        return out

    def _loglikelihood_tokens(
        self,
        requests: list[tuple[tuple[str, str], list[int], list[int]]],
        disable_tqdm: bool = False,
        override_bs: int | None = None,
    ) -> list[tuple[float, bool]]:
        """Score ``(request, context_enc, continuation_enc)`` triples with one POP prefill per context."""
        prepared = [self._truncate(ctx, cont) for _, ctx, cont in requests]
        # Contexts in batches of `batch_size`, longest first (little padding); all continuations of a context
        # travel with it.
        by_context: dict[tuple[int, ...], list[int]] = {}
        for i, (ctx, _) in enumerate(prepared):
            by_context.setdefault(tuple(ctx), []).append(i)
        contexts = sorted(by_context, key=lambda c: -len(c))
        batch = int(override_bs or self.batch_size)
        results: list[tuple[float, bool] | None] = [None] * len(requests)
        pad_id = self.tokenizer.pad_token_id
        progress.expect(len(requests))
        with tqdm(total=len(requests), disable=disable_tqdm or self.rank != 0, desc="POP loglikelihood") as bar:
            for start in range(0, len(contexts), batch):
                members = [i for ctx in contexts[start : start + batch] for i in by_context[ctx]]
                contexts_, continuations = [prepared[i][0] for i in members], [prepared[i][1] for i in members]
                key = batch_key(contexts_, continuations, pad_id, self.prefill_chunk)
                with apply_pop(self.model, self.pop_config):
                    scores = self._shared(key, partial(score_continuations, self.model, contexts_, continuations,
                                                       pad_id=pad_id, prefill_chunk=self.prefill_chunk))
                for i, answer in zip(members, scores):
                    results[i] = answer
                    if requests[i][0] is not None:
                        self.cache_hook.add_partial("loglikelihood", requests[i][0], answer)
                bar.update(len(members))
                progress.advance(len(members))
        return results  # type: ignore[return-value]  # every slot filled: each context's batch scores its members

    def _shared(self, key: bytes, compute: Any, generation: Generation | None = None) -> Any:
        """``compute()`` for this configuration on one batch, or the full model's lead's output for it where
        several configurations are scored on the same items (:mod:`poptune.engine.trunk`)."""
        trunk = attached_trunk(self.model)
        return compute() if trunk is None else trunk.run(self.model, key, compute, generation)

    def _truncate(self, context: list[int], continuation: list[int]) -> tuple[list[int], list[int]]:
        """HFLM's window: context and continuation[:-1] fit ``max_length``; the context loses its head."""
        if not context or not continuation:
            raise ConfigError("a loglikelihood request needs a non-empty context and continuation")
        keep = self.max_length + 1 - len(continuation)
        if len(context) > keep:
            if keep < 1:
                raise ConfigError(f"a continuation of {len(continuation)} tokens exceeds max_length {self.max_length}")
            context = context[-keep:]
        return context, continuation
