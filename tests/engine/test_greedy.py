"""The greedy pick every replayed decode uses: ``argmax``'s token, ties included."""

from __future__ import annotations

import pytest
import torch

from poptune.engine.greedy import greedy_pick


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_the_greedy_pick_is_argmaxs_first_of_tied_maxima(dtype):
    g = torch.Generator().manual_seed(0)
    for shape in [(64, 7), (5, 3, 4099), (3, 262144)]:  # few distinct values: ties in almost every row
        logits = torch.randint(0, 4, shape, generator=g).to(dtype)
        picked = greedy_pick(logits)
        assert torch.equal(picked, logits.argmax(dim=-1))
        first = (logits == logits.amax(dim=-1, keepdim=True)).int().argmax(dim=-1)  # the first maximum's index
        assert torch.equal(picked, first)
        assert bool((picked > 0).any())  # not a pick that always answers 0
    strided = torch.randint(0, 3, (4, 9, 1000), generator=g).to(dtype)[:, ::2]  # a view, as logits[:, -1] is
    assert torch.equal(greedy_pick(strided), strided.argmax(dim=-1))
    assert torch.equal(greedy_pick(strided), greedy_pick(strided.float()))  # a float copy changes no index
