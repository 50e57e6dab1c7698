"""Several configurations' greedy generations of one batch, their decode steps taken as one batch.

POP changes only the prompt's prefill; every configuration decodes with the full model. When the full model and
POP configurations generate answers to the same prompts (a shared trunk, :mod:`poptune.engine.trunk`), each
one's prefill is its own, but their decode steps run the same weights on rows of the same shape: stacked along
the batch, one step of ``K`` configurations over ``B`` prompts is one forward of ``K x B`` rows. On a CPU or GPU
a decode step of a small batch is bound by reading the weights (the LM head's above all), so the stacked step
costs little more than one configuration's.

For each configuration: its prefill exactly as ``generate`` makes it (``max_length`` one past the prompt), the
prompts' last hidden states of all of them through the LM head as one batch for their first tokens (where the
logits are just the head's); then the stacked rows step together at full depth
(:func:`poptune.engine.greedy.decode_forward`), every configuration's accounts kept as ``generate`` keeps them
(:class:`poptune.engine.greedy.Steps`: its own stopping criteria, pads after EOS, its own stop). A configuration
that has stopped leaves the batch. Where the full model is stacked too, a row whose answer so far is the full
model's is computed once with it in the layers below its block (:mod:`poptune.engine.repeats`). The sequences are
``generate``'s: bit for bit in bfloat16 on a CPU, where a product over many rows would round a few of them another
way and the stack's products are taken so that every row gets a lone row's sums (:func:`_exact_rows`); up to float
rounding in float32 and on CUDA (a matrix product over more rows may sum in another order there).

Only what :func:`~poptune.engine.greedy.replayable` accepts (greedy, no logits processors, text prompts) is
stacked; a configuration whose cache cannot be stacked (a compact cache that dropped tokens: the anchor K/V
source) steps beside the stack over its own cache, still replayed, and where the model's logits are just its LM
head's, its rows' final hidden states go through the head with the stack's: on its own, a few rows would pay for
reading the whole head every step. Memory: the stacked caches, up to :data:`STACK_BYTES` at a time; a
caller that decodes batch after batch keeps their buffers (:class:`StackBuffers`): a fresh buffer of a gigabyte
pays its page faults on every batch (about 2 s a batch of 8 embedded items of Gemma-3-270M on a 2-core CPU, a
seventh of its stacked decode), a reused one only its copy.

    outs = generate_together(model, inputs, [PopConfig(skip=0), PopConfig(skip=5)], max_new_tokens=8)
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from poptune.engine import PopConfig, apply_pop
from poptune.engine.greedy import Steps, decode_forward, eos_ids, greedy_pick, replayable
from poptune.engine.prefix import lend_whole
from poptune.engine.repeats import Repeats
from poptune.engine.segments import generate as plain_generate
from poptune.patching import Patch

if TYPE_CHECKING:
    import torch

    #: Each cache's K/V of one layer, in stack order.
    Parts = list[tuple[torch.Tensor, torch.Tensor]]

__all__ = ["STACK_BYTES", "StackBuffers", "generate_together"]

#: Bytes of stacked caches decoded together; configurations beyond them form the next stack.
STACK_BYTES = 2 << 30

#: Rows up to which oneDNN's bfloat16 ``F.linear`` on a CPU (AMX, the Xeon's) gives every row the sums a lone row
#: gets. Above that it takes another path whose roundings differ for a few rows (measured: q_proj of Gemma-3-270M, 1
#: row of 33 and 3 of 80 off by one bfloat16 step; the LM head likewise), enough to flip a near tie: a stack of 40
#: rows gave 5/window-64/0 another greedy answer than its own ``generate`` on a batch of 8 embedded prompts. The LM
#: head's :data:`poptune.models.head.BF16_ROWS` is this bound (a literal here: this module imports no torch on load).
EXACT_ROWS = 32

#: Rows per product the stacked decode takes as ``weight @ rows.T`` where it has more than :data:`EXACT_ROWS`:
#: that formulation gives every row a lone row's ``F.linear`` sums up to 78 rows for every product of
#: Gemma-3-270M (up to 160 for all but the MLP's down projection; measured on the Xeon), and for 72 rows it is as
#: fast as one ``F.linear`` (the LM head: 28 ms against 42 ms), where blocks of 32 through ``F.linear`` cost 3x.
STACK_ROWS = 72


class StackBuffers:
    """The stacked caches' buffers, kept from one batch's decode for the next (a shared trunk's, cleared with it).

    Each is a flat tensor per cache layer and K or V, grown when a batch needs more; a batch's stack views the
    front of it. A stack is decoded to its end before the next one takes the buffers, so they are never shared.
    """

    def __init__(self) -> None:
        self._flat: dict[tuple[int, int], "torch.Tensor"] = {}

    def nbytes(self) -> int:
        """Bytes held."""
        return sum(t.numel() * t.element_size() for t in self._flat.values())

    def take(self, slot: tuple[int, int], shape: tuple[int, ...], like: "torch.Tensor") -> "torch.Tensor":
        """An uninitialised contiguous tensor of ``shape`` with ``like``'s dtype and device, in ``slot``'s buffer."""
        import math

        need = math.prod(shape)
        flat = self._flat.get(slot)
        if flat is None or flat.numel() < need or flat.dtype != like.dtype or flat.device != like.device:
            self._flat[slot] = flat = like.new_empty(need)
        return flat[:need].view(shape)

    def clear(self) -> None:
        self._flat.clear()


@dataclass
class _Row:
    """One configuration's generation in progress: its accounts and, until stacked, its cache."""

    config: PopConfig
    steps: Steps
    cache: Any


def generate_together(model: Any, inputs: dict[str, Any], configs: Sequence[PopConfig], *, chunk: int | None = None,
                      stopping: Callable[[], Any] | None = None, buffers: StackBuffers | None = None,
                      **kwargs: Any) -> "list[torch.Tensor] | None":
    """Each configuration's greedy sequences for ``inputs`` (prompt included), as ``generate`` would give them.

    Args:
        model: The model; each configuration is applied in turn (``skip=0``: the full model).
        inputs: ``input_ids`` and optionally ``attention_mask`` (left-padded).
        configs: The configurations, distinct.
        chunk: Prefill in chunks of this many tokens (:mod:`poptune.engine.segments`).
        stopping: Makes a fresh ``StoppingCriteriaList`` (called once per configuration); None: none.
        buffers: Where the stacked caches live (kept for the caller's next batch); None: fresh ones.
        **kwargs: ``generate``'s (``max_length`` or ``max_new_tokens``, ``pad_token_id``, ...).

    Returns:
        One sequence tensor per configuration, in order; None when ``generate`` would not pick tokens by a bare
        argmax (sampling, beams, logits processors, image prompts): generate each plainly then.
    """
    import torch

    if not replayable(model, inputs, kwargs):
        return None
    kwargs = dict(kwargs)
    ids = inputs["input_ids"]
    n = ids.shape[1]
    mask = inputs.get("attention_mask")
    mask = torch.ones_like(ids) if mask is None else mask
    new = kwargs.pop("max_new_tokens", None)
    max_length = n + new if new is not None else kwargs.pop("max_length")
    kwargs.pop("max_length", None)
    pad = kwargs.get("pad_token_id", model.generation_config.pad_token_id)
    eos = eos_ids(model, kwargs)
    if pad is None and eos:
        return None  # generate would pad finished rows with an EOS token and warn: leave that to it
    prompt = {"input_ids": ids, "attention_mask": mask}
    shares = _shares_head(model)
    done: dict[int, torch.Tensor] = {}
    prefilled: list[tuple[int, _Row, torch.Tensor]] = []  # each with its prompt's last hidden states or first token
    held = 0
    for i, config in enumerate(configs):
        with apply_pop(model, config), _headless(model, shares):
            first = plain_generate(model, prompt, chunk=chunk, max_length=n + 1, return_dict_in_generate=True,
                                   output_logits=shares, **kwargs)
            lend_whole(model, first.cache, chunk, n)  # the layers before every block: the full model's K/V, copied
        row = _Row(config, Steps(ids, max_length, eos, int(pad or 0), stopping() if stopping else None), first.cache)
        prefilled.append((i, row, first.logits[-1] if shares else first.sequences[:, n]))
        held += _bytes(row.cache)
        if held >= STACK_BYTES:
            done.update(_decoded(model, prefilled, mask, max_length - n, buffers, shares))
            prefilled, held = [], 0
    if prefilled:
        done.update(_decoded(model, prefilled, mask, max_length - n, buffers, shares))
    return [done[i] for i in range(len(configs))]


@contextlib.contextmanager
def _exact_rows(model: Any) -> Iterator[bool | None]:
    """While held, where ``model`` runs in bfloat16 on a CPU, each of its linear products gives every row the sums a
    lone row gets (:data:`EXACT_ROWS`, :data:`STACK_ROWS`): the stack's rows are decoded bit for bit as each
    configuration's own decode of a batch decodes them. Elsewhere (float32, CUDA) nothing changes: the stack's
    products are equal to the engine's within rounding there. Yields whether the streamed product takes few rows
    too (an AMX CPU; see :func:`_exact`), None where nothing changes."""
    from torch import nn

    from poptune.device import dtype_of, native_bf16

    if model.device.type != "cpu" or dtype_of(model) != "bfloat16":
        yield None
        return
    few = native_bf16()  # up to EXACT_ROWS rows, F.linear's sums are the streamed product's on an AMX CPU
    patches = [Patch(m, functools.partial(_exact, m, few=few)) for m in model.modules() if isinstance(m, nn.Linear)]
    try:
        yield few
    finally:
        for patch in reversed(patches):
            patch.undo()


def _streams(rows: int, few: bool) -> bool:
    """Whether :func:`_exact` takes a product without a bias over ``rows`` rows as the streamed product."""
    return rows > EXACT_ROWS or (few and rows > 0)


def _exact(module: Any, inner: Callable[..., Any], few: bool = True) -> Callable[..., Any]:
    """``module``'s forward as ``weight @ rows.T`` in blocks of :data:`STACK_ROWS` rows
    (:func:`poptune.models.head.streamed`); up to :data:`EXACT_ROWS` rows ``inner`` itself unless ``few`` (an AMX
    CPU: there the streamed product gives those rows ``F.linear``'s sums, 1.3-1.8x faster from 2 rows on); a product
    with a bias: ``inner`` itself over blocks of :data:`EXACT_ROWS`, the bias rounded in with the sums as
    ``F.linear`` rounds it."""
    import torch

    from poptune.models.head import streamed

    def forward(x: "torch.Tensor") -> "torch.Tensor":
        width = x.shape[-1]
        rows = x.numel() // width if width else 0
        flat = x.reshape(rows, width)
        if module.bias is None and _streams(rows, few):
            out = torch.cat([streamed(module.weight, part) for part in flat.split(STACK_ROWS)])
        elif rows <= EXACT_ROWS:
            return inner(x)
        else:
            out = torch.cat([inner(part) for part in flat.split(EXACT_ROWS)])
        return out.reshape(*x.shape[:-1], out.shape[-1])

    return forward


@contextlib.contextmanager
def _headless(model: Any, shares: bool) -> Iterator[None]:
    """While held, where ``shares``, ``model``'s LM head hands back the final hidden states (the head is then taken
    once for several configurations' rows); otherwise nothing changes."""
    if not shares:
        yield
        return
    patch = Patch(model.get_output_embeddings(), lambda _inner: lambda states: states)
    try:
        yield
    finally:
        patch.undo()


def _firsts(model: Any, prefilled: list[tuple[int, _Row, "torch.Tensor"]], shares: bool) -> list["torch.Tensor"]:
    """Each prefilled configuration's first tokens (B,): where the head is shared, the prompts' last hidden states
    (``generate``'s float copy of them: exact) through it as one batch, as the stacked decode steps take it."""
    import torch

    if not shares:
        return [first for *_, first in prefilled]
    with _exact_rows(model) as few:
        picked = _picks(model, torch.cat([last for *_, last in prefilled]), few)  # (K x B,)
    return list(picked.split([last.shape[0] for *_, last in prefilled]))


def _picks(model: Any, hidden: "torch.Tensor", few: bool | None) -> "torch.Tensor":
    """The greedy token of each row of ``hidden`` (..., C: final hidden states) through ``model``'s LM head, within
    :func:`_exact_rows` (which yielded ``few``). On an AMX CPU, where the head's product is streamed, it is taken
    block by block of the head's rows and only each block's maxima are kept (:func:`poptune.models.head.
    streamed_picks`): the same logits, bit for bit there, never copied out whole."""
    import torch

    from poptune.models.head import streamed_picks

    head = model.get_output_embeddings()
    rows = hidden.reshape(-1, hidden.shape[-1]).to(head.weight.dtype)
    with torch.no_grad():
        if few and head.bias is None:
            return torch.cat([streamed_picks(head.weight, part) for part in rows.split(STACK_ROWS)])
        return greedy_pick(head(rows[:, None]))[:, 0]


def _decoded(model: Any, prefilled: list[tuple[int, _Row, "torch.Tensor"]], mask: "torch.Tensor", room: int,
             buffers: StackBuffers | None, shares: bool) -> dict[int, Any]:
    """The sequences, by index, of prefilled configurations (:func:`_firsts`): those their first token ended,
    a stack of the rest (``room`` more positions in its caches) and the unstackable ones decoded beside it."""
    out: dict[int, Any] = {}
    stack: list[tuple[int, _Row]] = []
    alone: list[tuple[int, _Row]] = []
    for (i, row, _), first in zip(prefilled, _firsts(model, prefilled, shares)):
        if row.steps.push(first):
            out[i] = row.steps.seq
        else:
            (stack if _stackable(row.cache) else alone).append((i, row))
    groups = []
    if stack:
        rows = [r for _, r in stack]
        repeats = Repeats.of([r.config for r in rows], [r.steps.seq[:, -1] for r in rows], len(rows[0].cache.layers))
        cache = _stacked([r.cache for r in rows], room, buffers or StackBuffers(), repeats) \
            if len(rows) > 1 else rows[0].cache
        groups.append(_Group(rows, cache, PopConfig(skip=0), stacked=len(rows) > 1, repeats=repeats))
    groups += [_Group([r], r.cache, r.config, stacked=False) for _, r in alone]
    decoded = _decode(model, groups, mask) if groups else {}
    return out | {i: decoded[id(r)] for i, r in [*stack, *alone]}


def _stackable(cache: Any) -> bool:
    """Whether ``cache`` holds plain per-row K/V (dynamic full or sliding-window layers) that can be stacked."""
    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

    return all(type(layer) in (DynamicLayer, DynamicSlidingWindowLayer) for layer in cache.layers)


def _bytes(cache: Any) -> int:
    return sum(t.numel() * t.element_size() for layer in cache.layers if layer.is_initialized
               for t in (layer.keys, layer.values))


def _stacked(caches: list[Any], room: int, buffers: StackBuffers, repeats: Repeats | None) -> Any:
    """The first cache, its rows followed by every other cache's (same prompt: same lengths and windows), each
    layer's K/V in a buffer with ``room`` more positions, so that a decode step writes in place instead of
    copying the whole stack (a dynamic layer concatenates its K/V on every update). Each cache's K/V is copied
    once, straight into its rows of the buffer (``buffers``), and let go; where rows repeat the full model's
    (``repeats``), a layer's buffer holds only the rows that layer computes, with room for every row."""
    full, sliding = _roomy_layers()
    into = caches[0]
    for i, layer in enumerate(into.layers):
        if layer.is_initialized:
            parts = [(c.layers[i].keys, c.layers[i].values) for c in caches]
            for c in caches[1:]:
                c.layers[i] = None  # its K/V now live in the buffer only (each is a few MB per layer)
            like = parts[0][0]
            into.layers[i] = (sliding if layer.is_sliding else full)(
                layer, parts, room, lambda shape, kv, i=i, like=like: buffers.take((i, kv), shape, like),
                None if repeats is None else repeats.order[i])
    return into


@functools.cache
def _roomy_layers() -> tuple[type, type]:
    """Dynamic full and sliding-window cache layers whose K/V live in a buffer with room to grow: the same
    keys, values and mask sizes as transformers' own after every update, without re-copying the past."""
    import torch
    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

    class Room:
        keys: "torch.Tensor | None"  # typed as the cache layer mixin types them, for the classes below
        values: "torch.Tensor | None"

        def _hold(self, parts: Parts, room: int, take: Callable[..., Any], held: list[int] | None) -> None:
            """``held``: the stack rows this layer holds, in its order (None: every row, in stack order)."""
            keys = parts[0][0]
            shape = (sum(k.shape[0] for k, _ in parts), keys.shape[1], keys.shape[2] + room, keys.shape[3])
            self._buffers = [take(shape, 0), take(shape, 1)]
            self._rows = _fill(self._buffers, parts, held)
            self._start, self._end = 0, keys.shape[2]
            self.device, self.is_initialized = keys.device, True
            self._view()

        def _view(self) -> None:
            self.keys, self.values = (b[: self._rows, :, self._start : self._end] for b in self._buffers)

        def _write(self, keys: "torch.Tensor", values: "torch.Tensor") -> tuple["torch.Tensor", "torch.Tensor"]:
            new = keys.shape[2]
            if self._end + new > self._buffers[0].shape[2]:  # out of room: move to a larger buffer
                self._buffers = [torch.cat([b[:, :, self._start : self._end], b.new_empty(
                    (*b.shape[:2], self._end - self._start + 2 * new, b.shape[3]))], dim=2)
                    for b in self._buffers]
                self._start, self._end = 0, self._end - self._start
            for b, kv in zip(self._buffers, (keys, values)):
                b[: self._rows, :, self._end : self._end + new] = kv
            self._end += new
            self._view()
            return self.keys, self.values  # type: ignore[return-value]

        def batch_select_indices(self, indices: "torch.Tensor") -> None:
            """Keep the rows ``indices`` (ascending), moved to the front of the buffer in place: a gathered copy
            of a stack this size would pay its page faults again."""
            for to, row in [(to, row) for to, row in enumerate(indices.tolist()) if to != row]:
                for b in self._buffers:
                    b[to] = b[row]
            self._rows = len(indices)
            self._view()

        def append_copy(self, row: int) -> None:
            """Hold one more row, a copy of row ``row``'s K/V (a repeated row leaving its twin: :mod:`~poptune.
            engine.repeats`)."""
            for b in self._buffers:
                b[self._rows, :, self._start : self._end] = b[row, :, self._start : self._end]
            self._rows += 1
            self._view()

    class Full(Room, DynamicLayer):
        def __init__(self, layer: Any, parts: Parts, room: int, take: Callable[..., Any],
                     held: list[int] | None) -> None:
            DynamicLayer.__init__(self)
            self._hold(parts, room, take, held)

        def update(self, key_states: "torch.Tensor", value_states: "torch.Tensor", *args: Any, **kwargs: Any) -> Any:
            return self._write(key_states, value_states)

    class Sliding(Room, DynamicSlidingWindowLayer):
        def __init__(self, layer: Any, parts: Parts, room: int, take: Callable[..., Any],
                     held: list[int] | None) -> None:
            DynamicSlidingWindowLayer.__init__(self, layer.sliding_window)
            self._hold(parts, room, take, held)
            self.cumulative_length = layer.cumulative_length

        def update(self, key_states: "torch.Tensor", value_states: "torch.Tensor", *args: Any, **kwargs: Any) -> Any:
            self.cumulative_length += key_states.shape[2]
            out = self._write(key_states, value_states)  # the window's past and the new tokens, as transformers does
            self._start = max(self._start, self._end - self.sliding_window + 1)  # then keeps the last window - 1
            self._view()
            return out

    return Full, Sliding


def _fill(buffers: list["torch.Tensor"], parts: "Parts", held: list[int] | None) -> int:
    """Copy the stack rows ``held`` (None: all, in order) of ``parts`` (each cache's K/V) into the front rows of
    ``buffers`` (K and V), runs of consecutive rows of one cache at a time; the rows copied."""
    where = [(i, r) for i, (k, _) in enumerate(parts) for r in range(k.shape[0])]  # stack row -> its cache, row
    runs: list[tuple[int, int]] = []  # (first stack row, rows)
    for s in range(len(where)) if held is None else held:
        if runs and sum(runs[-1]) == s and where[s][0] == where[runs[-1][0]][0]:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((s, 1))
    row = 0
    for first, count in runs:
        part, r = where[first]
        for buffer, kv in zip(buffers, parts[part]):
            buffer[row : row + count, :, : kv.shape[2]] = kv[r : r + count]
        row += count
    return row


class _Group:
    """Rows decoded over one cache under one configuration: a stack (under the full model: decode is full depth)
    or one unstackable configuration's rows (under its own: its cache needs it).

    In a stack, a prompt's row leaves as soon as ``generate`` would pad it whatever the model says (it ended, with
    an EOS configured), a configuration when all its rows ended: the rest step on without them. A stack with the
    full model's rows computes rows that repeat them once below their blocks (``repeats``)."""

    def __init__(self, rows: list[_Row], cache: Any, under: PopConfig, stacked: bool,
                 repeats: Repeats | None = None) -> None:
        import torch

        self.live, self.cache, self.under, self.stacked = list(rows), cache, under, stacked
        self.repeats = repeats
        self.held = {id(r): torch.arange(r.steps.seq.shape[0], device=r.steps.seq.device) for r in rows}

    def fed(self, mask: "torch.Tensor") -> tuple["torch.Tensor", "torch.Tensor"]:
        """The last token of every row still in the cache (R, 1), and those rows' prompt mask."""
        import torch

        return (torch.cat([r.steps.seq[self.held[id(r)], -1:] for r in self.live], dim=0),
                torch.cat([mask[self.held[id(r)]] for r in self.live], dim=0))

    def take(self, tokens: "torch.Tensor", out: dict[int, Any]) -> None:
        """Push one step's ``tokens`` (one per row fed), record the rows that ended in ``out``, drop them."""
        import torch

        keep: list[int] = []
        last: list[int] = []  # each row's token pushed: what it feeds next
        start = 0
        for r in self.live:
            mine = self.held[id(r)]
            new = tokens.new_full((r.steps.seq.shape[0],), r.steps.pad)  # a row that left: padded by push
            new[mine] = tokens[start : start + len(mine)]
            ended = r.steps.push(new)
            if self.repeats is not None:
                last.extend(r.steps.seq[mine, -1].tolist())
            if ended:
                out[id(r)] = r.steps.seq
            else:
                stay = ~r.steps.padded()[mine] if self.stacked else torch.ones_like(mine, dtype=torch.bool)
                keep.extend((start + torch.nonzero(stay).flatten()).tolist())
                self.held[id(r)] = mine[stay]
            start += len(mine)
        self.live = [r for r in self.live if id(r) not in out]
        if self.repeats is not None and self.live:
            self.repeats.step(last, keep, self.cache)
        elif self.live and len(keep) < tokens.shape[0]:
            self.cache.batch_select_indices(torch.tensor(keep, device=tokens.device))


def _shares_head(model: Any) -> bool:
    """Whether a decode step's logits are the LM head of the final hidden states and nothing more (no soft-capping,
    no scale): the model's architectures whose causal-LM forward is known to do just that."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return (type(model).__name__ in _HEAD_ONLY and getattr(config, "final_logit_softcapping", None) is None
            and hasattr(model.get_output_embeddings(), "weight"))


#: Causal LMs whose logits are ``lm_head(hidden_states)`` (Gemma 3's soft-capping checked apart).
_HEAD_ONLY = frozenset({"LlamaForCausalLM", "Qwen3ForCausalLM", "Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"})


def _decode(model: Any, groups: list[_Group], mask: "torch.Tensor") -> dict[int, "torch.Tensor"]:
    """Step ``groups`` together until every row has stopped; the sequences, by ``id`` of their row.

    Each group runs its own forward; where the model allows (:func:`_shares_head`), their final hidden states go
    through the LM head as one batch: an unstackable configuration's few rows would pay for reading the whole head
    on their own, on a CPU as much as the stack's many rows pay for computing it. On an AMX CPU each step's tokens
    are picked block by block of the head (:func:`_picks`): a stack of 72 rows' decode step about 10% faster."""
    import torch

    out: dict[int, torch.Tensor] = {}
    shared = _shares_head(model)
    with _exact_rows(model) as few:  # every row's sums those of its configuration's own decode
        while live := [g for g in groups if g.live]:
            fed = [g.fed(mask) for g in live]
            if shared:
                hidden = []
                with _headless(model, True):  # each forward hands back its hidden states
                    for g, (tokens, rows_mask) in zip(live, fed):
                        with apply_pop(model, g.under), _computing(model, g):
                            hidden.append(decode_forward(model, tokens, rows_mask, g.cache)[:, -1])
                picked = _picks(model, torch.cat(hidden, dim=0), few)  # (R,)
            else:
                parts = []
                for g, (tokens, rows_mask) in zip(live, fed):
                    with apply_pop(model, g.under), _computing(model, g):
                        parts.append(decode_forward(model, tokens, rows_mask, g.cache))
                picked = greedy_pick(torch.cat(parts, dim=0)[:, -1])  # (R,)
            start = 0
            for g, (tokens, _) in zip(live, fed):
                g.take(picked[start : start + tokens.shape[0]], out)
                start += tokens.shape[0]
    return out


def _computing(model: Any, group: _Group) -> contextlib.AbstractContextManager[None]:
    """Around a group's forward: its repeated rows computed once below their blocks (:mod:`poptune.engine.
    repeats`), where it has any."""
    from poptune.engine.pop import decoder_of

    return contextlib.nullcontext() if group.repeats is None else group.repeats.computing(decoder_of(model))
