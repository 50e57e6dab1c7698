"""POP inside vLLM: the skipped block of a served model, token by token of vLLM's flattened batches.

vLLM feeds its model one flat batch per step: the scheduled tokens of every running request, prompt chunks and
decode tokens mixed (``positions`` gives each token's place in its sequence). POP's rule is per token: a prompt
token at position ``p`` of a request whose prompt has ``P`` tokens is *pruned* when ``p < P - W`` (``W``, the
boundary width; the paper's ``last`` is 1, ``none`` is 0); every other token -- the boundary window and every
decode token -- is *deep*. Chunked prefill changes nothing: the rule reads positions, not chunks, so a chunk
before the boundary prunes all its tokens and the chunk holding the boundary runs those tokens deep, exactly as
poptune's engine does for a whole prompt (:mod:`poptune.engine.segments`).

In every layer of the skipped block (:func:`skipped_forward`):

1. the pruned tokens write their own K/V into vLLM's paged cache from the hidden state entering the layer (which,
   the layers before being identities for them, is the block entry's): the layer's input norm, its K/V rows of
   the fused QKV projection, its key norm (Qwen3, Gemma-3) and its rotary embedding (Gemma-3: the layer's own, local
   or global), at the slots vLLM assigned them; their hidden state passes through unchanged;
2. the deep tokens run the whole layer, their attention restricted to them as queries (the request's keys are the
   whole cache: earlier steps, the pruned tokens just written, their own). Deep tokens are a suffix of each
   request's scheduled tokens, so the kernel's bottom-right causal alignment over the unchanged sequence lengths
   is exact; sliding windows apply per query as in the full model.

Layers outside the block run every token as usual. The step's plan (which tokens are deep) needs the prompt
length of each request, which vLLM's model forward is not given: :mod:`poptune.serving.vllm_plugin` takes it
from the model runner when the step's attention metadata is built (:meth:`PopState.plan`).

The attention metadata of the deep tokens is rebuilt for vLLM's CPU attention backend (the kernel this project
runs and tests); other backends are refused by name when POP is applied (``docs/serving.md``).
"""

from __future__ import annotations

import dataclasses
import functools
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from poptune.errors import ConfigError, UnsupportedModelError

if TYPE_CHECKING:
    import torch

    from poptune.engine.pop import PopConfig

__all__ = ["PopState", "StepPlan", "apply", "deep_tokens"]

#: vLLM's attention implementations POP rebuilds the deep tokens' metadata for.
SUPPORTED_BACKENDS = ("CPUAttentionBackendImpl",)

#: vLLM's decoder classes (the module owning ``layers``) POP runs on: the seed's three families.
SUPPORTED_DECODERS = ("LlamaModel", "Qwen3Model", "Gemma3Model")


#: The K and V rows (weight, bias) of fused QKV projections, kept by the plugin when vLLM's CPU build packs the fused
#: weight for its own GEMM (and drops it): the pruned tokens' K/V are then computed without the query rows.
KV_ROWS: "weakref.WeakKeyDictionary[Any, tuple[torch.Tensor, torch.Tensor | None]]" = weakref.WeakKeyDictionary()


def deep_tokens(positions: "torch.Tensor", query_start_loc: "torch.Tensor", prompt_lens: "torch.Tensor",
                width: int) -> "torch.Tensor":
    """Which of a step's tokens run at full depth: ``positions[t] >= prompt_len(request of t) - width``.

    Args:
        positions: (T,) each scheduled token's position in its sequence.
        query_start_loc: (R + 1,) where each request's tokens start in the flat batch.
        prompt_lens: (R,) each request's prompt length.
        width: The boundary width (0 for ``none``).

    Returns:
        (T,) booleans.
    """
    import torch

    counts = (query_start_loc[1:] - query_start_loc[:-1]).long()  # (R,)
    requests = torch.repeat_interleave(torch.arange(len(counts)), counts)  # (T,)
    return positions.long() >= (prompt_lens.long() - width)[requests]


@dataclass
class StepPlan:
    """One step's split of the flat batch into pruned and deep tokens, and the deep tokens' request layout."""

    pruned: "torch.Tensor"  # (Tp,) token indices
    deep: "torch.Tensor"  # (Td,) token indices, a suffix of each request's tokens
    requests: "torch.Tensor"  # (Rd,) requests with a deep token
    query_start_loc: "torch.Tensor"  # (Rd + 1,) int32, where each such request's deep tokens start
    max_query_len: int
    _metadata: dict[int, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, positions: "torch.Tensor", query_start_loc: "torch.Tensor", prompt_lens: "torch.Tensor",
           width: int) -> "StepPlan | None":
        """The plan of a step, or None when no token is pruned (decode-only steps, prompts within the boundary)."""
        import torch

        deep = deep_tokens(positions, query_start_loc, prompt_lens, width)
        if bool(deep.all()):
            return None
        counts = (query_start_loc[1:] - query_start_loc[:-1]).long()
        requests_of = torch.repeat_interleave(torch.arange(len(counts)), counts)
        per_request = torch.bincount(requests_of[deep], minlength=len(counts))  # (R,)
        requests = torch.nonzero(per_request).flatten()
        starts = torch.zeros(len(requests) + 1, dtype=torch.int32)
        starts[1:] = torch.cumsum(per_request[requests], 0)
        return cls(pruned=torch.nonzero(~deep).flatten(), deep=torch.nonzero(deep).flatten(), requests=requests,
                   query_start_loc=starts, max_query_len=int(per_request.max()))

    def metadata(self, full: Any, attn: Any) -> Any:
        """The deep tokens' attention metadata of one layer, made from the step's (``full``) once per group."""
        key = id(full)
        if key not in self._metadata:
            self._metadata[key] = _cpu_metadata(self, full, attn)
        return self._metadata[key]


def _cpu_metadata(plan: StepPlan, full: Any, attn: Any) -> Any:
    """vLLM CPU attention metadata for the deep tokens as the only queries (their requests only)."""
    from vllm import _custom_ops as ops
    from vllm import envs

    impl = attn.impl
    seq_lens = full.seq_lens[plan.requests]
    scheduler = ops.cpu_attn_get_scheduler_metadata(
        num_reqs=len(plan.requests), num_heads=impl.num_heads, num_kv_heads=impl.num_kv_heads,
        head_dim=impl.head_size, seq_lens=seq_lens, dtype=attn.dtype, query_start_loc=plan.query_start_loc,
        causal=True, sliding_window_size=-1,  # -1 assumes no window: safe for any layer (the kernel applies its own)
        isa=attn.isa, enable_kv_split=envs.VLLM_CPU_ATTN_SPLIT_KV, kv_cache_dtype=impl.kv_cache_dtype)
    return dataclasses.replace(
        full, num_actual_tokens=len(plan.deep), max_query_len=plan.max_query_len,
        query_start_loc=plan.query_start_loc, seq_lens=seq_lens, block_table=full.block_table[plan.requests],
        slot_mapping=full.slot_mapping[plan.deep], scheduler_metadata=scheduler, causal=True)


class PopState:
    """POP applied to one loaded vLLM model: its configuration and the current step's plan."""

    def __init__(self, config: "PopConfig", skipped: tuple[int, ...]) -> None:
        self.config = config
        self.skipped = skipped
        self.current: StepPlan | None = None
        self._undo: list[Callable[[], None]] = []

    def remove(self) -> None:
        """Give the skipped layers their own forwards back (the model serves in full until POP is applied again)."""
        while self._undo:
            self._undo.pop()()
        self.current = None

    def plan(self, positions: "torch.Tensor", query_start_loc: "torch.Tensor", prompt_lens: "torch.Tensor") -> None:
        """Set the plan of the step about to run (called by the model runner's hook, once per step)."""
        self.current = StepPlan.of(positions, query_start_loc, prompt_lens, self.config.boundary_width)


def decoder_of(model: Any) -> Any:
    """The module owning ``layers`` in a vLLM causal LM (``model.model``; a multimodal wrapper's language model)."""
    for candidate in (getattr(model, "model", None), getattr(getattr(model, "language_model", None), "model", None)):
        if candidate is not None and hasattr(candidate, "layers"):
            return candidate
    raise UnsupportedModelError(f"POP in vLLM found no decoder layers in {type(model).__name__}")


def apply(model: Any, config: "PopConfig") -> PopState:
    """Apply ``config`` to a loaded vLLM model: each skipped layer's forward runs :func:`skipped_forward`.

    Raises:
        UnsupportedModelError: A decoder or attention backend POP does not cover here, or pipeline parallelism.
        ConfigError: A configuration that does not fit the model, or a K/V source other than the paper's.
    """
    from poptune.kv import registry

    decoder = decoder_of(model)
    name = type(decoder).__name__
    if name not in SUPPORTED_DECODERS:
        raise UnsupportedModelError(f"POP in vLLM covers {', '.join(SUPPORTED_DECODERS)}, not {name}")
    if not registry.is_default(config.kv):
        raise ConfigError(f"POP in vLLM writes the skipped layers' own K/V only, not the K/V source {config.kv!r}")
    layers = decoder.layers
    if getattr(decoder, "start_layer", 0) != 0 or getattr(decoder, "end_layer", len(layers)) != len(layers):
        raise UnsupportedModelError("POP in vLLM does not run under pipeline parallelism")
    skipped = tuple(config.skipped_layers(len(layers)))
    for i in skipped:
        impl = type(layers[i].self_attn.attn.impl).__name__
        if impl not in SUPPORTED_BACKENDS:
            raise UnsupportedModelError(f"POP in vLLM rebuilds attention metadata for {', '.join(SUPPORTED_BACKENDS)}"
                                        f", not {impl} (docs/serving.md)")
    state = PopState(config, skipped)
    for i in skipped:
        layer = layers[i]
        own = vars(layer).get("forward")  # None: the class's forward was in effect
        layer.forward = skipped_forward(layer, layer.forward, state)
        state._undo.append(functools.partial(_restore, layer, own))
    return state


def _restore(layer: Any, own: Any) -> None:
    if own is None:
        del layer.forward
    else:
        layer.forward = own


def write_pruned_kv(layer: Any, x: "torch.Tensor", positions: "torch.Tensor", slots: "torch.Tensor") -> None:
    """Write the K/V of tokens with hidden state ``x`` (Tp, C) into the layer's paged cache at ``slots``.

    The layer's own input norm, the K and V rows of its fused QKV projection (:data:`KV_ROWS`; else the whole
    projection, the query rows dropped), its key norm per head where it has one, and its rotary embedding.
    """
    import torch.nn.functional as F

    attn_module = layer.self_attn
    h = layer.input_layernorm(x)  # (Tp, C)
    kept = KV_ROWS.get(attn_module.qkv_proj)
    if kept is not None:  # the K/V rows kept when vLLM packed the fused weight: no query rows computed
        k, v = F.linear(h, *kept).split([attn_module.kv_size, attn_module.kv_size], dim=-1)
    else:  # the whole fused projection, the query rows dropped
        q_size, kv_size = attn_module.q_size, attn_module.kv_size
        _, k, v = attn_module.qkv_proj(h)[0].split([q_size, kv_size, kv_size], dim=-1)
    norm = getattr(attn_module, "k_norm", None)
    if norm is not None:
        k = norm(k.unflatten(-1, (-1, attn_module.head_dim))).flatten(-2)
    k, _ = attn_module.rotary_emb(positions, k.contiguous(), None)  # rotates in place on CPU: its own copy
    attn = attn_module.attn
    impl = attn.impl
    impl.do_kv_cache_update(attn, k.view(-1, impl.num_kv_heads, impl.head_size),
                            v.contiguous().view(-1, impl.num_kv_heads, impl.head_size), attn.kv_cache, slots)


@contextmanager
def _deep_only(layer: Any, plan: StepPlan) -> Iterator[None]:
    """Within the block, the layer's attention sees the deep tokens as its only queries and writes their slots."""
    from vllm.forward_context import get_forward_context

    context = get_forward_context()
    name = layer.self_attn.attn.layer_name
    metadata, slots = context.attn_metadata, context.slot_mapping
    saved = metadata[name], slots[name]
    metadata[name] = plan.metadata(saved[0], layer.self_attn.attn)
    slots[name] = saved[1][plan.deep]
    try:
        yield
    finally:
        metadata[name], slots[name] = saved


def skipped_forward(layer: Any, inner: Callable[..., Any], state: PopState) -> Callable[..., Any]:
    """The forward of a skipped layer: pruned tokens write their K/V and pass; deep tokens run the layer."""

    def forward(positions: "torch.Tensor", hidden_states: "torch.Tensor", residual: "torch.Tensor | None",
                **kwargs: Any) -> tuple["torch.Tensor", "torch.Tensor"]:
        import torch
        from vllm.forward_context import get_forward_context

        plan = state.current
        if plan is None:
            return inner(positions, hidden_states, residual, **kwargs)
        if residual is None:  # the stream is hidden_states + residual: a zero residual keeps it whole
            residual = torch.zeros_like(hidden_states)
        pruned = plan.pruned
        name = layer.self_attn.attn.layer_name
        stream = hidden_states[pruned] + residual[pruned]  # (Tp, C): the block entry's, unchanged since
        write_pruned_kv(layer, stream, positions[pruned], get_forward_context().slot_mapping[name][pruned])
        if len(plan.deep) == 0:
            return hidden_states, residual
        deep = plan.deep
        with _deep_only(layer, plan):
            h, r = inner(positions[deep], hidden_states[deep], residual[deep], **kwargs)  # (Td, C) each
        return hidden_states.index_copy(0, deep, h), residual.index_copy(0, deep, r)

    return forward
