"""The Prefill-Only Pruning (POP) engine on Hugging Face decoder models.

POP (arXiv 2602.03295) skips a block of deep layers while the prompt is encoded and keeps the full model for
decode. A skipped layer is an identity on the residual stream in prefill, but it still writes its prompt K/V
through its own input norm, K/V projections, key norm and RoPE, applied to the hidden state entering the
block, so that decode can attend to every layer. With boundary handling the last prompt token(s) run through
the full model, as a first decode step, so the first generated token sees full depth.

The engine wraps the forward of the decoder (the module that owns ``layers``) of a loaded model. After
:func:`apply_pop`, ordinary ``model(...)`` and ``model.generate(...)`` use POP. A forward is one of three stages:

- a **prompt** segment: over an empty cache (a new prompt, whatever its length), or several new tokens over a
  non-empty one (a later turn of a conversation, on top of the earlier turns' cache). The boundary rule applies;
- a **chunk**: a segment inside a prompt fed in chunks, declared with :func:`stage` (see
  :mod:`poptune.engine.segments`): no boundary, every token pruned;
- **decode**: one new token over a cache (or a forward declared so, e.g. a continuation scored at once): the
  untouched model.

A segment of ``N`` tokens with ``W`` boundary tokens is one pass in which every layer of the skipped block

1. writes the K/V of the first ``N - W`` (pruned) tokens as the configuration's K/V source says (the paper's:
   through the layer's own projections; :mod:`poptune.kv`) and passes their hidden states through unchanged (no
   attention, no FFN), and
2. runs in full for the last ``W`` (boundary) tokens, which attend to the cache, those K/V and their own.

Layers outside the block run as usual, so the boundary tokens see the full model (see
:mod:`poptune.engine.block`). The output of a segment holds hidden states (and so logits) only for the positions
that ran at full depth: the boundary window, the last prompt position when ``boundary="none"``, none for a chunk;
the pruned positions never reach the LM head. Prompts must be left-padded (right padding is refused).

Image prompts (``Qwen3VLForConditionalGeneration``, ``Gemma3ForConditionalGeneration`` with ``pixel_values``)
need nothing of their own: the vision encoder runs as usual in the model's forward, which merges the image
features into the token sequence, computes the positions (Qwen3-VL's multimodal RoPE, whose ``rope_deltas``
decode reads) and the attention masks, and only then calls the decoder this engine hooks. So POP runs over the
merged image+text sequence, and:

- **Masks.** A boundary token gets the rows of the model's own mask, sliced, not a causal mask rebuilt: with
  Gemma-3's bidirectional attention within an image, a boundary image token still sees the later tokens of its
  image (their K/V are in the cache by then, written in the same pass).
- **Windows and images.** The boundary is a token count from the end of the prompt and may start inside an
  image; it is not moved to the image's edges. This is exact, not an approximation of one: the retained layers
  run every token, image tokens with their whole image, as in the full model; in the skipped block every
  boundary token (image or text) runs the layer with its exact mask row and position over the pruned tokens'
  K/V. With ``skip=1`` the boundary logits equal the full model's even when the window cuts an image, and
  with the full model's K/V in place of the projected ones POP reproduces the full model at any skip.
  ``boundary="last"`` (the paper's rule) puts only the final text token there.
- **Deepstack (Qwen3-VL).** Visual features are added to the image positions of the hidden state after the
  first decoder layers. An injection after a skipped layer still applies: it is an input to the residual
  stream at that depth, not part of the layer, and the skipped layer hands on every position (pruned ones
  unchanged), so deeper skipped layers write their K/V from ``x + deepstack``. In the 8B model the injections
  follow layers 0-2, so only ``skip >= 34`` of 36 reaches them.

The package (floor 2; ``docs/architecture.md``): this module is the engine (:func:`apply_pop`; ``PopConfig`` and
every outside form of a configuration are ``config``'s), re-exported by the package; ``block``: the skipped block's
forward and masks; ``segments``: prompts fed in segments (chunked prefill, turns); ``prefix``: prefix-state reuse;
``speculate``: greedy POP generation verified in rounds.
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from poptune.engine.block import cache_context, mask_layout, skipping
from poptune.engine.config import PopConfig
from poptune.errors import ConfigError, InputError, UnsupportedModelError
from poptune.kv import registry
from poptune.kv.source import Segment
from poptune.patching import Patch

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = ["STAGES", "PopConfig", "PopHandle", "apply_pop", "remove_pop", "get_pop_config", "decoder_of",
           "stage"]

# Decoder classes (the module owning `layers`) the engine knows, by the model family they belong to.
_SUPPORTED_DECODERS: dict[str, str] = {
    "LlamaModel": "llama",
    "Qwen3Model": "qwen3",
    "Gemma3TextModel": "gemma3",
    "Qwen3VLTextModel": "qwen3_vl",
}

_STATE_ATTR = "_poptune_pop"

#: What a forward of a model with POP can be (see :func:`stage`).
STAGES: tuple[str, ...] = ("prompt", "chunk", "decode")


@dataclass
class _PopState:
    config: PopConfig
    decoder: Any  # decoder_of(model)
    skipped: "range | tuple[int, ...]"
    patch: Patch | None = None
    stage: str | None = None  # set by stage(); None: told by the token count


class PopHandle:
    """Returned by :func:`apply_pop`; as a context manager it restores, on exit, the configuration the model had
    before (none: POP is removed)."""

    def __init__(self, model: "nn.Module", previous: PopConfig | None = None) -> None:
        self.model = model
        self.previous = previous

    @property
    def config(self) -> PopConfig:
        return getattr(self.model, _STATE_ATTR).config

    def remove(self) -> None:
        remove_pop(self.model)

    def __enter__(self) -> "PopHandle":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.previous is None:
            remove_pop(self.model)
        else:
            apply_pop(self.model, self.previous)


def decoder_of(model: "nn.Module") -> Any:
    """The decoder module (owner of ``layers``) of a supported model, or :class:`UnsupportedModelError`.

    Typed ``Any``: its ``layers``, ``config`` and each layer's ``self_attn`` are the model family's own attributes,
    which ``nn.Module.__getattr__`` would type ``Tensor | Module``."""
    candidates: list[Any] = [model]
    inner = getattr(model, "model", None)
    if inner is not None:
        candidates += [inner, getattr(inner, "language_model", None)]
    candidates.append(getattr(model, "language_model", None))
    for module in candidates:
        if module is not None and type(module).__name__ in _SUPPORTED_DECODERS:
            return module
    supported = ", ".join(sorted(set(_SUPPORTED_DECODERS.values())))
    raise UnsupportedModelError(
        f"POP does not support {type(model).__name__} (supported families: {supported})"
    )


def apply_pop(model: "nn.Module", config: PopConfig) -> PopHandle:
    """Make ``model`` run POP prefill with ``config``; decode stays the unmodified model.

    Applying again replaces the configuration. The returned handle, used as a context manager, restores the
    previous one (or removes POP) on exit::

        with apply_pop(model, PopConfig(skip=6)):
            out = model.generate(**inputs)

    The decoder's forward is wrapped, not replaced: a forward already set on it (an instance attribute,
    accelerate's ``device_map`` or offload hooks) keeps running, and :func:`remove_pop` restores it.

    Raises:
        UnsupportedModelError: the architecture or its attention implementation is not one the engine knows.
        ConfigError: the configuration does not fit the model's depth, or its K/V source cannot run on the model
            as it is (:meth:`poptune.kv.source.KVSource.ready`).
    """
    if not isinstance(config, PopConfig):
        raise ConfigError(f"apply_pop needs a PopConfig, got {type(config).__name__}")
    decoder = decoder_of(model)
    skipped = config.skipped_layers(len(decoder.layers))
    layout = mask_layout(decoder.config)  # an attention implementation POP cannot mask: refused before any change
    registry.source(config.kv).ready(decoder, config, skipped, layout)  # a source the model is not ready for: too
    state = getattr(model, _STATE_ATTR, None)
    previous = state.config if state is not None else None
    if state is None:
        state = _PopState(config=config, decoder=decoder, skipped=skipped)
        state.patch = Patch(decoder, lambda inner: functools.partial(_pop_forward, state, inner))
        setattr(model, _STATE_ATTR, state)
    else:
        state.config, state.skipped = config, skipped
    return PopHandle(model, previous)


def remove_pop(model: "nn.Module") -> None:
    """Restore the plain model (and any forward the decoder had before). A model without POP is left as it is."""
    state = getattr(model, _STATE_ATTR, None)
    if state is None:
        return
    state.patch.undo()
    delattr(model, _STATE_ATTR)


def get_pop_config(model: "nn.Module") -> PopConfig | None:
    """The configuration applied to ``model``, or None."""
    state = getattr(model, _STATE_ATTR, None)
    return state.config if state is not None else None


@contextlib.contextmanager
def stage(model: "nn.Module", kind: str) -> Iterator[None]:
    """Declare what the forwards of ``model`` inside the block are, whatever their token count.

    ``"prompt"``: prefill segments that end a prompt (the boundary rule applies); ``"chunk"``: prefill segments
    inside a prompt (no boundary: every token is pruned, no position yields logits); ``"decode"``: the full
    model (e.g. a continuation scored at once). Outside, a forward over an empty cache is a prompt, and over a
    non-empty one, a single token is decode and several are a prompt. A no-op for a model without POP.
    """
    if kind not in STAGES:
        raise ConfigError(f"`kind` must be one of {', '.join(STAGES)}, got {kind!r}")
    state = getattr(model, _STATE_ATTR, None)
    if state is None:
        yield
        return
    previous, state.stage = state.stage, kind
    try:
        yield
    finally:
        state.stage = previous


# --------------------------------------------------------------------------------------------------------------
# The stage-aware forward


def _pop_forward(
    state: _PopState,
    inner: Any,
    input_ids: "torch.Tensor | None" = None,
    attention_mask: Any = None,
    position_ids: "torch.Tensor | None" = None,
    cache: Any = None,
    inputs_embeds: "torch.Tensor | None" = None,
    use_cache: bool | None = None,
    **kwargs: Any,
) -> Any:
    """The decoder's forward under POP; ``inner`` is the decoder's forward it wraps."""
    decoder = state.decoder
    if cache is None:
        cache = kwargs.pop("past_key_values", None)
    inputs = dict(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                  inputs_embeds=inputs_embeds, **kwargs)
    tokens = input_ids if input_ids is not None else inputs_embeds
    n = tokens.shape[1] if tokens is not None else 0
    past = cache.get_seq_length() if cache is not None else 0
    kind = state.stage or ("decode" if n == 1 and past > 0 else "prompt")
    pruned = n if kind == "chunk" else state.config.rule.pruned(n)
    # Prefix states (see poptune.engine.prefix) are whole prompts from position 0: segments over a cache never use them.
    prefix = getattr(decoder, "_poptune_prefix_states", None) if past == 0 else None
    if state.config.skip == 0 or kind == "decode" or pruned <= 0:
        # Decode, or a segment inside the boundary window: the unmodified model (over the cache as its source says).
        recording = prefix.recording(decoder, inputs) if prefix is not None and n > 1 else contextlib.nullcontext()
        with recording, cache_context(decoder, cache):
            return inner(cache=cache, use_cache=use_cache, **inputs)

    from transformers import DynamicCache

    layout = mask_layout(decoder.config)
    pads = _check_left_padded(attention_mask, n)
    if use_cache is None:
        use_cache = decoder.config.use_cache
    if cache is None:  # the boundary tokens attend to the skipped layers' K/V through a cache
        cache = DynamicCache(config=decoder.config)
    replaying = prefix.replaying(decoder, inputs, min(state.skipped)) if prefix is not None \
        else contextlib.nullcontext()
    source = registry.source(state.config.kv)
    source.ready(decoder, state.config, state.skipped, layout)
    segment = Segment(pruned, None if pads == 0 else attention_mask, n, pads)
    write = source.writer(decoder, state.config, state.skipped, segment)
    attending = cache_context(decoder, cache, state.skipped)  # over a cache its source marked, outside the block
    import torch

    # One tensor handed through the block, written in place, unless autograd or a caller recording every layer's
    # output needs each layer's own.
    recorded = kwargs.get("output_hidden_states", getattr(decoder.config, "output_hidden_states", False))
    reuse = not torch.is_grad_enabled() and not recorded
    with skipping(decoder, state.skipped, pruned, layout, write, reuse), attending, replaying:
        out = inner(cache=cache, use_cache=True, **inputs)
    # Only positions that ran at full depth yield logits: (B, N, C) -> (B, N - P, C); with boundary "none", the
    # prompt's last (pruned) position, which predicts the first token; a chunk, none.
    everything_pruned = pruned == n and kind == "prompt"
    out.last_hidden_state = out.last_hidden_state[:, -1:] if everything_pruned else out.last_hidden_state[:, pruned:]
    if not use_cache:
        out.cache = None
    return out


def _check_left_padded(mask: Any, n: int) -> int | None:
    """Refuse a segment whose 2-D attention mask has padding after a real token: the boundary is the last
    tokens of every row, which right padding would fill with pads. Returns the most pads a row of the segment
    starts with (0 without a 2-D mask), None where the check was skipped (unknown).

    Reading the mask on the host synchronises the device, so each mask is checked once: a mask found
    left-padded is remembered (by identity, while it lives, and its version where it has one), and later
    prefills of the same inputs skip the check. A timed prefill is warmed up on its inputs first, so the check
    runs outside the timed calls, and the POP side is not charged a device sync the full model never makes.
    Skipped while a CUDA graph is being captured (capture forbids the sync): a captured call has run eagerly
    before (the warm-up calls of :func:`poptune.measure.graphs.capture`), so its mask was checked there.
    """
    if mask is None or not hasattr(mask, "ndim") or mask.ndim != 2:
        return 0
    root = getattr(mask, "_base", None)
    root = mask if root is None else root  # the model hands the decoder a new view of the caller's mask each call
    key = (id(root), mask.data_ptr(), tuple(mask.shape), tuple(mask.stride()), n)
    known = _LEFT_PADDED.get(key)
    if known is not None and known[0]() is root and known[1] == _version_of(root):
        return known[2]
    if _capturing():
        return None
    rows, pads = _right_padded_rows(mask[:, -n:])
    if rows:
        raise InputError(f"POP needs left-padded prompts, but row(s) {rows} have padding after a token (right "
                         "padding): set the tokenizer's padding_side to 'left'")
    _LEFT_PADDED[key] = (weakref.ref(root, functools.partial(_forget, key)), _version_of(root), pads)
    return pads


#: Masks found left-padded, by (id of the tensor owning the memory, address, shape, strides, segment length): a
#: weak reference to that tensor (an id alone may be reused), its version when checked (None for inference
#: tensors, which keep none) and the most pads a row starts with.
_LEFT_PADDED: dict[tuple[Any, ...], tuple[Any, int | None, int]] = {}


def _forget(key: tuple[Any, ...], _: Any) -> None:
    """The weak reference's callback: its mask is gone."""
    _LEFT_PADDED.pop(key, None)


def _version_of(mask: Any) -> int | None:
    try:
        return int(mask._version)
    except (AttributeError, RuntimeError):  # inference tensors track no version
        return None


def _right_padded_rows(new: Any) -> tuple[list[int], int]:
    """Rows of a (B, N) mask with a pad after a real token, and the most pads a row starts with; reads the mask
    on the host (a device sync)."""
    new = new.bool()  # (B, N)
    after = new[:, :-1] & ~new[:, 1:]
    pads = int((~new).sum(dim=-1).max()) if new.numel() else 0
    if not bool(after.any()):
        return [], pads
    return sorted({int(r) for r in after.nonzero()[:, 0]}), pads


def _capturing() -> bool:
    """Whether the current CUDA stream is capturing a graph (False on a CPU-only build of torch, whose query raises)."""
    import torch

    try:
        return bool(torch.cuda.is_current_stream_capturing())
    except Exception:  # noqa: BLE001 -- what a CPU-only build raises differs between torch versions
        return False
