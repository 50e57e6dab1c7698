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
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

__all__ = ["MAX_ROWS", "RowsHead", "use_rows_head"]

#: Rows up to which the head is ``weight @ hidden.T`` (measured faster up to 256 rows on the AMD EPYC, slower at 512).
MAX_ROWS = 128


class RowsHead(nn.Linear):
    """An ``nn.Linear`` whose product for a few float32 rows on the CPU is ``weight @ hidden.T`` (same parameters,
    same state dict: only ``forward`` differs)."""

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        width = hidden.shape[-1]
        rows = hidden.numel() // width if width else 0
        if (0 < rows <= MAX_ROWS and self.bias is None and hidden.device.type == "cpu"
                and hidden.dtype == self.weight.dtype == torch.float32):
            logits = torch.mm(self.weight, hidden.reshape(rows, width).T).T.contiguous()
            return logits.reshape(*hidden.shape[:-1], self.out_features)
        return super().forward(hidden)


def use_rows_head(model: Any) -> None:
    """Make ``model``'s output embedding (an exact ``nn.Linear``, its LM head) a :class:`RowsHead` in place: its
    parameters, ties and hooks stay as they are. A model without one, or with another kind, is left as it is."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if type(head) is nn.Linear:
        head.__class__ = RowsHead
