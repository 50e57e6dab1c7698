"""The Prefill-Only Pruning (POP) engine on Hugging Face decoder models.

POP (arXiv 2602.03295) skips a block of deep layers while the prompt is encoded and keeps the full model for
decode. A skipped layer is an identity on the residual stream in prefill, but it still writes its prompt K/V
through its own input norm, K/V projections, key norm and RoPE, applied to the hidden state entering the
block, so that decode can attend to every layer. With boundary handling the last prompt token(s) run through
the full model, as a first decode step, so the first generated token sees full depth.

The engine hooks the decoder (the module that owns ``layers``) of a loaded model. After :func:`apply_pop`,
ordinary ``model(...)`` and ``model.generate(...)`` use POP: a forward over an empty cache with more than one
new token is a prefill. It is one pass over the prompt in which every layer of the skipped block

1. writes the K/V of the first ``N - W`` (pruned) prompt tokens through its own projections and passes their
   hidden states through unchanged (no attention, no FFN), and
2. runs in full for the last ``W`` (boundary) tokens, which attend to those K/V and their own.

Layers outside the block run as usual, so the boundary tokens see the full model. Every later forward
(decode) is the untouched model. The output of a POP prefill holds hidden states (and so logits) only for the
positions that ran at full depth: the boundary window, or the last prompt position when ``boundary="none"``;
the pruned positions never reach the LM head.

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
"""

from __future__ import annotations

import contextlib
import re
import sys
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Iterator

from .errors import ConfigError, UnsupportedModelError

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = ["BOUNDARIES", "PopConfig", "PopHandle", "apply_pop", "remove_pop", "get_pop_config", "decoder_of"]

#: The boundary rules the tuner searches; ``window-<W>`` for any positive W is accepted too.
BOUNDARIES: tuple[str, ...] = ("none", "last", "window-4", "window-16", "window-64")

_WINDOW = re.compile(r"^window-([1-9][0-9]*)$")

# Decoder classes (the module owning `layers`) the engine knows, by the model family they belong to.
_SUPPORTED_DECODERS: dict[str, str] = {
    "LlamaModel": "llama",
    "Qwen3Model": "qwen3",
    "Gemma3TextModel": "gemma3",
    "Qwen3VLTextModel": "qwen3_vl",
}

_STATE_ATTR = "_poptune_pop"


@dataclass(frozen=True)
class PopConfig:
    """One POP configuration.

    Args:
        skip: Number of layers skipped in prefill (0 = the full model).
        boundary: ``"none"`` (the whole prompt is pruned), ``"last"`` (tokens 1..N-1 pruned, token N through
            the full model: the paper's rule) or ``"window-W"`` (the last W prompt tokens through the full
            model).
        offset: Number of final layers kept even in prefill. The skipped block is
            ``[L - offset - skip, L - offset)``; the paper's case is 0.
        layers: An explicit set of skipped layers instead of a final block (for baselines that choose layers by
            a metric, e.g. ShortGPT's prefill-only variant); ``skip`` must equal its size and ``offset`` be 0.
    """

    skip: int
    boundary: str = "last"
    offset: int = 0
    layers: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        for name in ("skip", "offset"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"`{name}` must be an integer, got {value!r}")
            if value < 0:
                raise ConfigError(f"`{name}` must be >= 0, got {value}")
        if not isinstance(self.boundary, str) or (
            self.boundary not in ("none", "last") and not _WINDOW.match(self.boundary)
        ):
            raise ConfigError(
                f"`boundary` must be one of {', '.join(BOUNDARIES)} (or window-<W>), got {self.boundary!r}"
            )
        if self.layers is not None:
            layers = self.layers
            if not isinstance(layers, tuple) or any(isinstance(i, bool) or not isinstance(i, int) for i in layers):
                raise ConfigError(f"`layers` must be a tuple of layer indices, got {layers!r}")
            if list(layers) != sorted(set(layers)) or (layers and layers[0] < 0):
                raise ConfigError(f"`layers` must be distinct indices >= 0 in increasing order, got {list(layers)}")
            if self.skip != len(layers) or self.offset:
                raise ConfigError(f"with `layers`, `skip` must be {len(layers)} (their number) and `offset` 0")

    @property
    def boundary_width(self) -> int:
        """Number of final prompt tokens that run through the full model (0 for ``none``)."""
        if self.boundary == "none":
            return 0
        if self.boundary == "last":
            return 1
        return int(self.boundary.split("-", 1)[1])

    def check(self, num_layers: int) -> None:
        """Raise :class:`ConfigError` unless this configuration fits a model with ``num_layers`` layers."""
        if self.layers and self.layers[-1] >= num_layers:
            raise ConfigError(f"`layers` must be in [0, {num_layers - 1}] for this model, got {list(self.layers)}")
        if self.skip > num_layers - 1:
            raise ConfigError(f"`skip` must be in [0, {num_layers - 1}] for this model, got {self.skip}")
        if self.offset > num_layers - 1 - self.skip:
            raise ConfigError(
                f"`offset` must be in [0, {num_layers - 1 - self.skip}] for this model with skip={self.skip}, "
                f"got {self.offset}"
            )

    def skipped_layers(self, num_layers: int) -> tuple[int, ...] | range:
        """Indices of the layers skipped in prefill: ``layers``, else ``[L - offset - skip, L - offset)``."""
        self.check(num_layers)
        if self.layers is not None:
            return self.layers
        stop = num_layers - self.offset
        return range(stop - self.skip, stop)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if self.layers is None:
            del data["layers"]  # a final block: the three fields every stored configuration has
        else:
            data["layers"] = list(self.layers)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PopConfig":
        unknown = set(data) - {"skip", "boundary", "offset", "layers"}
        if unknown:
            raise ConfigError(f"unknown PopConfig field(s): {', '.join(sorted(unknown))}")
        if "skip" not in data:
            raise ConfigError("a PopConfig needs `skip`")
        data = dict(data)
        if data.get("layers") is not None:
            data["layers"] = tuple(data["layers"])
        return cls(**data)

    def __str__(self) -> str:
        text = f"skip={self.skip} boundary={self.boundary} offset={self.offset}"
        return text if self.layers is None else f"{text} layers={','.join(map(str, self.layers))}"


@dataclass
class _PopState:
    config: PopConfig
    decoder: "nn.Module"
    skipped: "range | tuple[int, ...]"


class PopHandle:
    """Returned by :func:`apply_pop`; use it as a context manager to remove POP on exit."""

    def __init__(self, model: "nn.Module") -> None:
        self.model = model

    @property
    def config(self) -> PopConfig:
        return getattr(self.model, _STATE_ATTR).config

    def remove(self) -> None:
        remove_pop(self.model)

    def __enter__(self) -> "PopHandle":
        return self

    def __exit__(self, *exc: object) -> None:
        remove_pop(self.model)


def decoder_of(model: "nn.Module") -> "nn.Module":
    """The decoder module (owner of ``layers``) of a supported model, or :class:`UnsupportedModelError`."""
    candidates = [model]
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

    Applying again replaces the configuration. The returned handle removes POP when used as a context
    manager::

        with apply_pop(model, PopConfig(skip=6)):
            out = model.generate(**inputs)

    Raises:
        UnsupportedModelError: the architecture is not one the engine knows.
        ConfigError: the configuration does not fit the model's depth.
    """
    if not isinstance(config, PopConfig):
        raise ConfigError(f"apply_pop needs a PopConfig, got {type(config).__name__}")
    decoder = decoder_of(model)
    skipped = config.skipped_layers(len(decoder.layers))
    state = _PopState(config=config, decoder=decoder, skipped=skipped)

    def forward(*args: Any, **kwargs: Any) -> Any:
        return _pop_forward(state, *args, **kwargs)

    decoder.forward = forward  # instance attribute: shadows the class's forward until remove_pop
    setattr(model, _STATE_ATTR, state)
    return PopHandle(model)


def remove_pop(model: "nn.Module") -> None:
    """Restore the plain model. A model without POP is left as it is."""
    state = getattr(model, _STATE_ATTR, None)
    if state is None:
        return
    if "forward" in vars(state.decoder):
        del state.decoder.forward
    delattr(model, _STATE_ATTR)


def get_pop_config(model: "nn.Module") -> PopConfig | None:
    """The configuration applied to ``model``, or None."""
    state = getattr(model, _STATE_ATTR, None)
    return state.config if state is not None else None


# --------------------------------------------------------------------------------------------------------------
# The stage-aware forward


def _pop_forward(
    state: _PopState,
    input_ids: "torch.Tensor | None" = None,
    attention_mask: Any = None,
    position_ids: "torch.Tensor | None" = None,
    cache: Any = None,
    inputs_embeds: "torch.Tensor | None" = None,
    use_cache: bool | None = None,
    **kwargs: Any,
) -> Any:
    decoder = state.decoder
    if cache is None:
        cache = kwargs.pop("past_key_values", None)
    inputs = dict(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                  inputs_embeds=inputs_embeds, **kwargs)
    tokens = input_ids if input_ids is not None else inputs_embeds
    n = tokens.shape[1] if tokens is not None else 0
    past = cache.get_seq_length() if cache is not None else 0
    pruned = n - state.config.boundary_width
    prefix = getattr(decoder, "_poptune_prefix_states", None)  # see poptune.prefix
    if state.config.skip == 0 or n <= 1 or past > 0 or pruned <= 0:
        # Decode, a one-token prompt, or a prompt inside the boundary window: the unmodified model.
        recording = prefix.recording(decoder, inputs) if prefix is not None and n > 1 and past == 0 \
            else contextlib.nullcontext()
        with recording:
            return type(decoder).forward(decoder, cache=cache, use_cache=use_cache, **inputs)

    from transformers import DynamicCache

    if use_cache is None:
        use_cache = decoder.config.use_cache
    if cache is None:  # the boundary tokens attend to the skipped layers' prompt K/V through a cache
        cache = DynamicCache(config=decoder.config)
    replaying = prefix.replaying(decoder, inputs, min(state.skipped)) if prefix is not None \
        else contextlib.nullcontext()
    with _skipping(decoder, state.skipped, pruned), replaying:
        out = type(decoder).forward(decoder, cache=cache, use_cache=True, **inputs)
    # Only positions that ran at full depth yield logits: (B, N, C) -> (B, W, C), or (B, 1, C) for "none".
    out.last_hidden_state = out.last_hidden_state[:, pruned:] if pruned < n else out.last_hidden_state[:, -1:]
    if not use_cache:
        out.cache = None
    return out


@contextlib.contextmanager
def _skipping(decoder: "nn.Module", skipped: "range | tuple[int, ...]", pruned: int) -> Iterator[None]:
    """Within the block, layers write the pruned tokens' K/V only and run in full for the boundary tokens."""
    layers = [decoder.layers[i] for i in skipped]
    for layer in layers:
        layer.forward = _skipped_layer_forward(layer, pruned)
    try:
        yield
    finally:
        for layer in layers:
            del layer.forward


def _skipped_layer_forward(layer: "nn.Module", pruned: int) -> Any:
    """One prefill through a skipped layer, all prompt tokens at once.

    Tokens ``[0, pruned)`` pass through unchanged and write their K/V through the layer's own projections
    (POP's independent K/V). Tokens ``[pruned, N)`` -- the boundary -- run the whole layer, attending to those
    K/V and to their own: exactly what a separate boundary pass over the cache would compute, without paying
    a second forward over the model.
    """

    def forward(
        hidden_states: "torch.Tensor",  # (B, N, C)
        *,
        attention_mask: Any = None,
        position_embeddings: Any = None,
        cache: Any = None,
        **kwargs: Any,
    ) -> "torch.Tensor":
        import torch

        cos, sin = position_embeddings  # (B, N, D) each
        _write_prompt_kv(layer, hidden_states[:, :pruned], (cos[:, :pruned], sin[:, :pruned]), cache)
        n = hidden_states.shape[1]
        if pruned == n:
            return hidden_states
        position_ids = kwargs.pop("position_ids", None)
        if isinstance(position_ids, torch.Tensor):
            kwargs["position_ids"] = position_ids[..., pruned:]
        boundary = type(layer).forward(
            layer,
            hidden_states[:, pruned:],  # (B, W, C)
            attention_mask=_boundary_mask(attention_mask, cache, layer, pruned, n, hidden_states.device),
            position_embeddings=(cos[:, pruned:], sin[:, pruned:]),
            cache=cache,
            **kwargs,
        )
        return torch.cat([hidden_states[:, :pruned], boundary], dim=1)

    return forward


def _boundary_mask(mask: Any, cache: Any, layer: "nn.Module", start: int, stop: int, device: Any) -> Any:
    """The attention mask of the boundary queries ``[start, stop)`` over the keys the cache will return.

    The model built ``mask`` for the whole prompt, (B, 1, N, N) over absolute positions. The boundary queries
    need its rows ``[start, stop)`` and the columns the cache holds for this layer once their own K/V are
    added: all positions for full attention, the last ``window - 1`` pruned ones and the boundary for a
    sliding-window layer. Without a mask (SDPA's causal shortcut: no padding) one query may see every key; a
    window of several queries needs an explicit bottom-right-aligned causal mask.
    """
    import torch

    layer_idx = layer.self_attn.layer_idx
    kv_length, kv_offset = cache.get_mask_sizes(stop - start, layer_idx)
    if isinstance(mask, torch.Tensor):
        return mask[..., start:stop, kv_offset : kv_offset + kv_length]  # (B, 1, W, KV)
    if mask is not None:
        raise UnsupportedModelError(f"POP cannot slice an attention mask of type {type(mask).__name__}")
    if stop - start == 1:
        return None
    query = torch.arange(start, stop, device=device).unsqueeze(1)  # (W, 1) absolute positions
    key = torch.arange(kv_offset, kv_offset + kv_length, device=device).unsqueeze(0)  # (1, KV)
    allowed = key <= query
    window = getattr(layer.self_attn, "sliding_window", None)
    if window:
        allowed &= query - key < window
    return allowed[None, None]  # (1, 1, W, KV)


def _write_prompt_kv(layer: "nn.Module", hidden_states: "torch.Tensor", position_embeddings: Any, cache: Any) -> None:
    """Independent K/V projection of a skipped layer: k = RoPE(k_norm(W_K LN(x))), v = W_V LN(x)."""
    attn = layer.self_attn
    normed = layer.input_layernorm(hidden_states)  # (B, P, C)
    shape = (*normed.shape[:-1], -1, attn.head_dim)
    keys = attn.k_proj(normed).view(shape)  # (B, P, H_kv, D)
    k_norm = getattr(attn, "k_norm", None)
    if k_norm is not None:
        keys = k_norm(keys)
    keys = keys.transpose(1, 2)  # (B, H_kv, P, D)
    values = attn.v_proj(normed).view(shape).transpose(1, 2)  # (B, H_kv, P, D)
    cos, sin = position_embeddings
    # The architecture's own RoPE (Gemma-3 local vs global bases, Qwen3-VL's interleaved mRoPE are already
    # folded into cos/sin by the model's rotary embedding for this layer).
    rope = sys.modules[type(attn).__module__].apply_rotary_pos_emb
    _, keys = rope(keys, keys, cos, sin)
    cache.update(keys, values, attn.layer_idx)
