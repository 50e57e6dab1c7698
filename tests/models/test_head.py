"""The LM head's few-rows product on the CPU (poptune.models.head): F.linear's logits within float32 rounding, taken
only where it applies, on every model load_model loads."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from poptune.device import native_bf16
from poptune.models import load_model
from poptune.models.head import BF16_ROWS, MAX_ROWS, RowsHead, use_rows_head

#: Whether this CPU has AMX, read at collection (the suite's session fixture then hides it: float32 everywhere).
AMX = native_bf16()


def _head(out: int = 300, width: int = 48, bias: bool = False) -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(width, out, bias=bias)


class _Model(nn.Module):
    def __init__(self, head: nn.Module) -> None:
        super().__init__()
        self.lm_head = head

    def get_output_embeddings(self) -> nn.Module:
        return self.lm_head


@pytest.fixture
def calls(monkeypatch):
    """Which way each product went: ``linear`` (nn.Linear's forward) or ``rows`` (weight @ hidden.T)."""
    seen: list[str] = []
    plain, mm = nn.Linear.forward, torch.mm
    monkeypatch.setattr(nn.Linear, "forward", lambda self, x: seen.append("linear") or plain(self, x))
    monkeypatch.setattr(torch, "mm", lambda a, b: seen.append("rows") or mm(a, b))
    return seen


@pytest.mark.parametrize("shape", [(1, 48), (2, 1, 48), (3, 5, 48), (MAX_ROWS, 48)])
def test_a_few_rows_give_f_linears_logits_through_weight_times_hidden(shape, calls):
    head = _head()
    want = nn.functional.linear(x := torch.randn(*shape), head.weight)
    use_rows_head(_Model(head))
    assert type(head) is RowsHead
    got = head(x)
    assert calls == ["rows"] and got.shape == want.shape and got.is_contiguous()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["many rows", "bias", "bfloat16 rows", "float16", "empty"])
def test_every_other_product_is_f_linears_own(case, calls):
    head = _head(bias=case == "bias")
    rows = {"many rows": MAX_ROWS + 1, "empty": 0, "bfloat16 rows": BF16_ROWS + 1}.get(case, 4)
    x = torch.randn(rows, 48)
    if case.startswith(("bfloat16", "float16")):
        dtype = torch.bfloat16 if case.startswith("bfloat16") else torch.float16
        head, x = head.to(dtype), x.to(dtype)
    want = nn.functional.linear(x, head.weight, head.bias)
    use_rows_head(_Model(head))
    assert type(head) is RowsHead and torch.equal(head(x), want) and calls == ["linear"]


@pytest.mark.parametrize("rows", [1, 2, 8, BF16_ROWS])
def test_a_few_bfloat16_rows_take_the_streamed_product_on_an_amx_cpu_and_the_same_logits(rows, calls, monkeypatch):
    """In bfloat16 the head streams its weight for up to BF16_ROWS rows where the CPU has AMX (elsewhere F.linear):
    the logits are F.linear's bit for bit on such a CPU (Gemma 3's head's shape), so no remembered answer changes."""
    import poptune.device

    torch.manual_seed(0)
    head = nn.Linear(640, 262144, bias=False, dtype=torch.bfloat16)
    x = (torch.randn(rows, 640) * 2).to(torch.bfloat16)
    use_rows_head(_Model(head))
    for amx in (False, True):
        monkeypatch.setattr(poptune.device, "native_bf16", lambda amx=amx: amx)
        calls.clear()
        got = head(x)
        assert calls == (["rows"] if amx else ["linear"]) and got.shape == (rows, 262144) and got.is_contiguous()
    if not AMX:
        pytest.skip("bit-for-bit equality is this product's property on an AMX CPU (oneDNN's bfloat16 kernels)")
    assert torch.equal(got, nn.functional.linear(x, head.weight))


def test_only_an_exact_linear_head_is_replaced():
    class Other(nn.Linear):
        pass

    model = _Model(Other(4, 8))
    use_rows_head(model)
    assert type(model.lm_head) is Other
    bare = nn.Sequential(nn.Linear(4, 8))  # no output embedding at all: left as it is
    use_rows_head(bare)
    assert type(bare[0]) is nn.Linear


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3"])
def test_load_model_gives_every_model_the_rows_head_its_weights_and_ties_kept(name, calls):
    model, _ = load_model(name)
    head = model.get_output_embeddings()
    assert type(head) is RowsHead and "lm_head.weight" in model.state_dict()
    if model.config.get_text_config().tie_word_embeddings:
        assert head.weight is model.get_input_embeddings().weight
    ids = torch.tensor([[5, 9, 2, 7], [3, 3, 8, 1]])
    with torch.no_grad():
        rows = model(ids).logits
        assert calls.count("rows") == 1  # the head's product, once
        head.__class__ = nn.Linear
        plain = model(ids).logits
    torch.testing.assert_close(rows, plain, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not AMX, reason="taken only for bfloat16 rows on a CPU that multiplies them in hardware (AMX)")
@pytest.mark.parametrize("rows", [1, 2, 8, 33, 72])
def test_picks_taken_block_by_block_are_the_whole_products_argmax_first_of_ties(rows):
    """On an AMX CPU, where the stacked decode takes it: streamed_picks gives every bfloat16 row the argmax of its
    streamed logits, ties going to the first index (planted across blocks); each block's logits are bit for bit the
    whole product's. The head is 2 blocks of Gemma 3's width."""
    from poptune.models.head import PICK_BLOCK, streamed, streamed_picks

    g = torch.Generator().manual_seed(rows)
    weight = (torch.randn(2 * PICK_BLOCK, 640, generator=g) * 0.05).to(torch.bfloat16)
    weight[PICK_BLOCK + 5] = weight[7]  # every row's logits tie at 7 and in the second block
    hidden = torch.randn(rows, 640, generator=g).to(torch.bfloat16)
    hidden[0] = weight[7] * 50  # row 0's maximum is the tie
    whole = streamed(weight, hidden).contiguous()
    picks = streamed_picks(weight, hidden)
    assert torch.equal(picks, whole.argmax(dim=-1))
    assert picks[0] == 7
    halves = torch.cat([streamed(weight[s : s + PICK_BLOCK], hidden) for s in (0, PICK_BLOCK)], dim=1)
    assert torch.equal(halves, whole)
