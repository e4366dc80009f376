"""The oracle on hand-built logits, its input checks, and the pure-Python argmax."""

from __future__ import annotations

import pytest
import torch

from reference.checks import InvalidInput, check_d2t, check_float_ids
from reference.head import NOT_A_ROW, check_vocab, row_ids
from reference.oracle import classic_tokens, draft_logits
from reference.pyargmax import py_argmax

INF, NAN = float("inf"), float("nan")


def tokens_of(rows, vocab=None, tp=1, **kw):
    """Oracle tokens for given logits, one row at a time: weight -0.0 and hidden 1 leave logits = bias."""
    out = []
    for row in rows:
        bias = torch.tensor(row, dtype=torch.float32)
        weight = torch.full((len(row), 1), -0.0)
        shards = zip(weight.split(len(row) // tp), bias.split(len(row) // tp), strict=True)
        weights, biases = zip(*shards, strict=True)
        kw = {"padding_size": len(row), **kw}  # every row of the list is a row of the head
        out += classic_tokens(torch.ones(1, 1), weights, biases, vocab=vocab or len(row), **kw).tolist()
    return out


def test_first_maximum_nan_and_signed_zero():
    assert tokens_of([[1, 3, 3, 2], [1, NAN, 3, NAN], [-0.0, 0.0, -1, -2], [-INF] * 4], tp=2) == [1, 1, 0, 0]


def test_padding_is_dropped():
    assert tokens_of([[1, 2, 9, 9]], vocab=2, tp=2) == [1]


def test_added_ids_are_placed_by_global_id_and_the_logits_vocabulary_cut():
    # org 3, added 2, padding 2, tp 2: rank 0 holds ids [0, 1 | 3], rank 1 holds [2, pad | 4]
    bias = [torch.tensor([10.0, 11.0, 13.0]), torch.tensor([12.0, 99.0, 14.0])]
    shards = [torch.full((3, 1), -0.0)] * 2
    logits = draft_logits(torch.ones(1, 1), shards, bias, vocab=5, org_vocab=3, added_vocab=2, padding_size=2)
    assert logits.tolist() == [[10.0, 11.0, 12.0, 13.0, 14.0]]
    cut = draft_logits(torch.ones(1, 1), shards, bias, vocab=2, org_vocab=3, added_vocab=2, padding_size=2)
    assert cut.tolist() == [[10.0, 11.0]]  # ids 2, 3, 4 are beyond the logits vocabulary


def test_uneven_shards_are_placed_by_the_widths_and_padding_dropped():
    # 5 ids cut into widths [3, 3]: rank 0 holds ids 0-2, rank 1 ids 3, 4 and a padding row
    bias = [torch.tensor([10.0, 11.0, 12.0]), torch.tensor([13.0, 14.0, 99.0])]
    shards = [torch.full((3, 1), -0.0)] * 2
    assert draft_logits(torch.ones(1, 1), shards, bias, vocab=5, widths=(3, 3)).tolist() == [[10, 11, 12, 13, 14]]
    cut = draft_logits(torch.ones(1, 1), shards, bias, vocab=4, org_vocab=5, widths=(3, 3))
    assert cut.tolist() == [[10.0, 11.0, 12.0, 13.0]]
    with pytest.raises(InvalidInput, match=r"widths \[3, 1\] cannot cut a head of 5 ids"):
        draft_logits(torch.ones(1, 1), [shards[0], shards[0][:1]], None, vocab=5, widths=(3, 1))


def test_each_shard_takes_its_own_ranks_hidden_states():
    """Where the ranks' copies differ, the classic path gathers each shard's logits as its own rank computed them."""
    weights = [torch.tensor([[1.0], [2.0]]), torch.tensor([[3.0], [4.0]])]
    copies = [torch.tensor([[1.0]]), torch.tensor([[-1.0]])]
    assert draft_logits(copies, weights, None, vocab=4, padding_size=4).tolist() == [[1.0, 2.0, -3.0, -4.0]]
    with pytest.raises(InvalidInput, match="2 weight shards but 1 ranks' hidden states"):
        draft_logits(copies[:1], weights, None, vocab=4, padding_size=4)


def test_head_rows_by_global_id():
    assert row_ids(3, 2, 2, 2).tolist() == [[0, 1, 3], [2, NOT_A_ROW, 4]]
    assert row_ids(1010, 16, 64, 2)[1, -1] == NOT_A_ROW  # vLLM's docstring example: 1088 rows
    with pytest.raises(InvalidInput, match=r"logits_vocab 6 exceeds the head's 5 ids \(3 base \+ 2 added\)"):
        check_vocab(3, 2, 2, 6, 1)
    with pytest.raises(InvalidInput, match="tp=3 cannot split this head: the 128 padded base rows"):
        check_vocab(100, 0, 64, 100, 3)


def test_d2t_scatter_and_all_neg_inf_row():
    d2t = torch.tensor([3, 3, 4])  # targets 3, 4, 6
    assert tokens_of([[1, 5, 2], [-INF, -INF, -INF]], d2t=d2t, target_vocab=8) == [4, 0]


def test_scale_and_soft_cap():
    assert tokens_of([[10.0, 11.0]], scale=2.0) == [1]
    assert tokens_of([[30.0, 40.0]], soft_cap=0.5) == [0]  # both saturate to 0.5: the first wins


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"scale": 0.0}, "scale must be a finite number > 0"),
        ({"scale": -1.0}, "negative scale reverses"),
        ({"scale": NAN}, "scale"),
        ({"soft_cap": 0.0}, "soft_cap"),
        ({"d2t": torch.tensor([0, 0])}, "target_vocab is required"),
        ({"d2t": torch.tensor([0, 5]), "target_vocab": 4}, r"out of range \[0, 4\): 1 -> 6"),
        ({"d2t": torch.tensor([1, 0]), "target_vocab": 4}, "not injective: draft ids 0 and 1 both map to target 1"),
        ({"d2t": torch.tensor([0.0, 0.0]), "target_vocab": 4}, "integer offsets"),
        ({"d2t": torch.tensor([0, 0, 0]), "target_vocab": 4}, "3 entries but the draft vocabulary has 2"),
    ],
)
def test_oracle_rejects_bad_input(kw, match):
    with pytest.raises(InvalidInput, match=match):
        tokens_of([[1.0, 2.0]], **kw)


def test_oracle_rejects_bad_shapes_and_dtypes():
    hidden, weight = torch.ones(2, 3), torch.ones(4, 3)
    with pytest.raises(InvalidInput, match="shape mismatch"):
        classic_tokens(hidden, [torch.ones(4, 2)], vocab=4, padding_size=4)
    with pytest.raises(InvalidInput, match="dtype mismatch"):
        classic_tokens(hidden, [weight.half()], vocab=4, padding_size=4)
    with pytest.raises(InvalidInput, match="bias must be 1-D with 4 entries"):
        classic_tokens(hidden, [weight], [torch.ones(3)], vocab=4, padding_size=4)
    with pytest.raises(InvalidInput, match="must be 2-D"):
        classic_tokens(torch.ones(3), [weight], vocab=4, padding_size=4)
    with pytest.raises(InvalidInput, match="dtype must be one of"):
        classic_tokens(hidden.double(), [weight.double()], vocab=4, padding_size=4)
    with pytest.raises(InvalidInput, match="weight shard 0 has 4 rows; a head of 5 base"):
        classic_tokens(hidden, [weight], vocab=5, padding_size=4)


def test_d2t_targets_and_float_id_limit():
    assert check_d2t(torch.tensor([2, 2, 5]), 3).tolist() == [2, 3, 7]
    check_float_ids(2**24 - 1)
    with pytest.raises(InvalidInput, match=r"exact only below 2\*\*24"):
        check_float_ids(2**24)


def test_py_argmax():
    assert [py_argmax(r) for r in ([2.0, 5.0, 5.0], [1.0, NAN, NAN], [-0.0, 0.0], [-INF, -INF])] == [1, 1, 0, 0]
    with pytest.raises(ValueError, match="empty"):
        py_argmax([])
