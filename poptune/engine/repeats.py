"""The stacked decode's rows that repeat the full model's, computed once in the layers below their blocks.

Below a configuration's skipped block its layers are the full model's, and so are their prompt K/V (the same
prompt through the same layers: bit for bit, whether copied from the full model's cache or computed again). A
stacked row -- one configuration's answer to one prompt -- whose tokens so far are the full model's row's for the
same prompt (its *twin*) feeds those layers the same token at the same position over the same K/V: there it
computes exactly what its twin computes. So each layer of the stack (:mod:`poptune.engine.joint`) computes only the
rows that can differ there -- the full model's, each configuration's from its block's first layer on, and the rows
whose answer has left their twin's (*own* rows) -- and every other row takes its twin's output. Each layer's cache
holds only the rows that layer computes; a row that leaves its twin (or whose twin ends before it) gets a copy of
the twin's K/V in the layers below its block, once, and is computed there from the next step on.

Every row a layer computes gets the sums its configuration's own decode gives it (the stack's products give each
row a lone row's sums in bfloat16 on a CPU, attention is per row): the answers are the stack's, bit for bit where
the stack's are. On the embedded tasks about half of the stack's row-layers repeat (the answers mostly agree); on
the long-prompt pack's long answers few do.

    repeats = Repeats.of(rows, decoder)            # after the first tokens, before the caches are stacked
    with repeats.computing(decoder):                # around each stacked forward
        ...
    repeats.step(last_tokens, keep, cache)          # after each step's tokens: leaves, copies, drops
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from poptune.patching import Patch

if TYPE_CHECKING:
    import torch

__all__ = ["Repeats"]


class Repeats:
    """Which stacked rows each decoder layer computes, and where every other row takes its output from.

    Rows are numbered in stack order (every live configuration's live prompt rows, in turn). ``starts[s]``: the first
    layer row ``s`` always computes (0 for the full model's rows); ``twins[s]``: its twin's row, None once it is own.
    ``order[j]``: the rows layer ``j``'s cache holds, in its cache's row order.
    """

    def __init__(self, starts: list[int], twins: list[int | None], layers: int, device: Any) -> None:
        self.starts, self.twins, self.device = starts, twins, device
        self.order = [[s for s in range(len(starts)) if self._computes(s, j)] for j in range(layers)]
        self.copied = self.skipped = self.total = 0  # rows that left their twin; row-layers not computed, in all
        self._index()

    @classmethod
    def of(cls, configs: Sequence[Any], last: Sequence["torch.Tensor"], layers: int) -> "Repeats | None":
        """For stacked configurations (``last``: each one's tokens so far, last column, one per prompt row);
        None where no row can repeat (no full model among them)."""
        full = next((k for k, c in enumerate(configs) if c.skip == 0), None)
        if full is None or len(configs) < 2:
            return None
        rows = len(last[0])
        starts: list[int] = []
        twins: list[int | None] = []
        ends = [t.tolist() for t in last]
        for k, config in enumerate(configs):
            skipped = config.skipped_layers(layers)
            start = min(skipped) if k != full and skipped else 0  # a configuration that skips nothing: no twin
            for p in range(rows):
                starts.append(start)
                same = k != full and start > 0 and ends[k][p] == ends[full][p]
                twins.append(full * rows + p if same else None)
        return cls(starts, twins, layers, last[0].device)

    def _computes(self, s: int, layer: int) -> bool:
        return self.twins[s] is None or layer >= self.starts[s]

    def _index(self) -> None:
        """Each layer's rows to compute (None: all, in stack order) and, per stack row, its output's row there."""
        import torch

        everyone = list(range(len(self.starts)))
        self.layers: list[tuple[torch.Tensor, torch.Tensor] | None] = []
        for order in self.order:
            if order == everyone:
                self.layers.append(None)
                continue
            at = {s: i for i, s in enumerate(order)}
            source = [at[s] if s in at else at[self.twins[s]] for s in everyone]  # type: ignore[index]
            self.layers.append((torch.tensor(order, device=self.device), torch.tensor(source, device=self.device)))

    @contextlib.contextmanager
    def computing(self, decoder: Any) -> Iterator[None]:
        """While held, each of ``decoder``'s layers that skips rows computes only its own and hands every row its
        output."""
        self.skipped += sum(len(self.starts) - len(order) for order in self.order)
        self.total += len(self.starts) * len(self.order)
        patches = [Patch(decoder.layers[j], functools.partial(_layer, rows=rows[0], sources=rows[1]))
                   for j, rows in enumerate(self.layers) if rows is not None]
        try:
            yield
        finally:
            for patch in reversed(patches):
                patch.undo()

    def step(self, last: Sequence[int], keep: Sequence[int], cache: Any) -> None:
        """After a step: ``last`` holds each row's newest token (stack order), ``keep`` the rows that go on. A row
        kept whose token is not its twin's, or whose twin leaves, becomes own: its twin's K/V copied into its own
        row of each layer below its block. Then every layer's cache drops the rows that leave."""
        import torch

        kept = set(keep)
        copied = self.copied
        for s in keep:
            twin = self.twins[s]
            if twin is not None and (twin not in kept or last[s] != last[twin]):
                for j in range(self.starts[s]):
                    cache.layers[j].append_copy(self.order[j].index(twin))
                    self.order[j].append(s)
                self.twins[s] = None
                self.copied += 1
        if self.copied == copied and len(keep) == len(self.starts):
            return  # nothing changed: every layer computes the rows it did
        renumber = {s: i for i, s in enumerate(keep)}
        for j, order in enumerate(self.order):
            staying = [i for i, s in enumerate(order) if s in kept]
            if len(staying) < len(order):
                cache.layers[j].batch_select_indices(torch.tensor(staying, device=self.device))
            self.order[j] = [renumber[s] for s in order if s in kept]
        self.starts = [self.starts[s] for s in keep]
        self.twins = [None if self.twins[s] is None else renumber[self.twins[s]] for s in keep]  # type: ignore[index]
        self._index()


def _layer(inner: Any, rows: "torch.Tensor", sources: "torch.Tensor") -> Any:
    """A decoder layer's forward over the stack that runs ``inner`` on ``rows`` only (their hidden states, masks,
    positions) and gives every stack row its output's row ``sources``."""

    def forward(hidden_states: "torch.Tensor", *args: Any, **kwargs: Any) -> Any:
        everyone = hidden_states.shape[0]

        def pick(value: Any) -> Any:
            if isinstance(value, tuple):
                return tuple(pick(v) for v in value)
            if hasattr(value, "index_select") and value.dim() > 0 and value.shape[0] == everyone:
                return value.index_select(0, rows)
            return value

        named = {k: pick(v) if k in _PER_ROW else v for k, v in kwargs.items()}
        out = inner(pick(hidden_states), *args, **named)
        if isinstance(out, tuple):
            return (out[0].index_select(0, sources), *out[1:])
        return out.index_select(0, sources)

    return forward


#: A decoder layer's keyword arguments that hold one entry per row (the rest are the same for every row).
_PER_ROW = frozenset({"attention_mask", "position_embeddings", "position_ids"})
