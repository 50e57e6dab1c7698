"""The LM head of a loaded model, computed as ``weight @ hidden.T`` when a few rows ask for logits on the CPU.

A decode step (and a prefill that keeps only its last logits) asks the LM head for a few rows' logits: a
``(rows x C) @ (C x V)`` product with V = 262,144 for Gemma 3. On this project's 2-core AMD EPYC, torch's CPU
build (MKL) computes ``F.linear`` of that shape 2.7-4.4x slower for 2 to 10 rows than the same product taken as
``weight @ hidden.T``, the ``V x C`` weight streamed once (``leaderboards/lm-head-*``, ``benchmarks/bench_lm_head.py``:
2 rows 126 against 46 ms, 10 rows 304 against 111 ms; one row even). A decode step of the stacked configurations
(:mod:`poptune.engine.joint`) and every configuration's own greedy decode pay that product at every token.

:func:`use_rows_head` gives a model's output embedding that formulation for up to :data:`MAX_ROWS` rows, in float32
on the CPU; any other product (a prefill's full logits, a GPU's, another dtype's) is ``F.linear``'s as before.
The logits are the same sums taken in another order: equal to ``F.linear``'s within float32 rounding, not bit for
bit (:data:`poptune.store.answers.SCORING_VERSION` was bumped with it). :func:`poptune.models.load_model` applies it
to every model it loads, so the per-configuration engine and the shared trunk use the same head.

In bfloat16 on a CPU that multiplies it in hardware (AMX: where studies run in bfloat16), oneDNN's ``F.linear``
gives each of up to 32 rows the sums that row gets alone, and so does ``weight @ hidden.T``: 1.3-1.6x faster for
Gemma 3's head from 1 to 16 rows, 1.5-1.8x for its body's products from 2 rows (one row alone takes a slower
kernel, so it goes as two, the first kept: :func:`streamed`). The head takes that product for up to
:data:`BF16_ROWS` rows there: the same logits, bit for bit, in less time (``benchmarks/bench_lm_head.py --dtype
bfloat16``); the stacked decode takes it for every linear product (:mod:`poptune.engine.joint`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

__all__ = ["BF16_ROWS", "MAX_ROWS", "PICK_BLOCK", "RowsHead", "streamed", "streamed_picks", "use_rows_head"]

#: Rows up to which the head is ``weight @ hidden.T`` (measured faster up to 256 rows on the AMD EPYC, slower at 512).
MAX_ROWS = 128

#: Rows up to which a bfloat16 head on an AMX CPU is :func:`streamed`: up to there ``F.linear`` gives every row a lone
#: row's sums, as :func:`streamed` does, so the logits are bit for bit the same (above, ``F.linear`` rounds a few rows
#: another way: :data:`poptune.engine.joint.EXACT_ROWS`).
BF16_ROWS = 32


def streamed(weight: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``rows @ weight.T`` for ``rows`` (R, C) taken as ``weight @ rows.T``, the weight streamed once; one row goes
    as two and the first is kept (in bfloat16 on an AMX CPU the two-row product is the faster kernel, and it gives
    each row a lone row's sums). The result is (R, out), not contiguous."""
    if rows.shape[0] == 1 and rows.dtype == torch.bfloat16:
        return torch.mm(weight, torch.cat([rows, rows]).T)[:, :1].T
    return torch.mm(weight, rows.T).T


#: Rows of the weight per block of :func:`streamed_picks` (2 MB of logits for 72 rows: they stay in cache).
PICK_BLOCK = 16384


def streamed_picks(weight: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """The greedy token (R,) of each row's :func:`streamed` logits: ``argmax``'s, the first of tied maxima.

    The product is taken block by block of ``weight``'s rows, :data:`PICK_BLOCK` at a time, each block's logits made
    contiguous while in cache and only their maxima kept. A caller of :func:`streamed` copies the whole (R, out)
    product into row order first: for Gemma 3's head and 72 bfloat16 rows on the 2-core Xeon that copy costs about
    what the product costs (41 ms a pick this way against 65 ms; 8 rows alike: ``leaderboards/lm-head-picks-*``). In
    bfloat16 on an AMX CPU, where the stacked decode takes it (:mod:`poptune.engine.joint`), each block's logits are
    the whole product's, bit for bit (``tests/models/test_head.py``); in float32 a lone row's product over fewer rows
    of the weight can round otherwise."""
    values, indices = [], []
    for start in range(0, weight.shape[0], PICK_BLOCK):
        best = streamed(weight[start : start + PICK_BLOCK], rows).contiguous().max(dim=-1)
        values.append(best.values)
        indices.append(best.indices + start)
    if len(values) == 1:
        return indices[0]
    block = torch.stack(values).max(dim=0).indices  # the first block holding a row's maximum
    return torch.stack(indices).gather(0, block[None])[0]


class RowsHead(nn.Linear):
    """An ``nn.Linear`` whose product for a few float32 rows on the CPU (bfloat16 rows on an AMX CPU) is
    ``weight @ hidden.T`` (same parameters, same state dict: only ``forward`` differs)."""

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        width = hidden.shape[-1]
        rows = hidden.numel() // width if width else 0
        if 0 < rows <= _rows_streamed(hidden, self.weight) and self.bias is None:
            logits = streamed(self.weight, hidden.reshape(rows, width)).contiguous()
            return logits.reshape(*hidden.shape[:-1], self.out_features)
        return super().forward(hidden)


def _rows_streamed(hidden: torch.Tensor, weight: torch.Tensor) -> int:
    """Rows up to which the head's product of ``hidden`` is :func:`streamed` (0: never)."""
    if hidden.device.type != "cpu" or hidden.dtype != weight.dtype:
        return 0
    if hidden.dtype == torch.float32:
        return MAX_ROWS
    if hidden.dtype == torch.bfloat16:
        from poptune.device import native_bf16

        return BF16_ROWS if native_bf16() else 0
    return 0


def use_rows_head(model: Any) -> None:
    """Make ``model``'s output embedding (an exact ``nn.Linear``, its LM head) a :class:`RowsHead` in place: its
    parameters, ties and hooks stay as they are. A model without one, or with another kind, is left as it is."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if type(head) is nn.Linear:
        head.__class__ = RowsHead
