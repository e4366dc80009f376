"""The top-k pieces: the oracle's order against plain Python, and local top-k + merge against the oracle."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from groups.simulated import run_simulated
from reference.checks import InvalidInput
from reference.pyargmax import py_top_k
from reference.topk import classic_top_k, top_k_ids
from sharded.local_top_k import SENTINEL_ID, local_top_k, merge_pairs

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
BITS = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}
# NaNs by bit pattern, as torch's float -> bfloat16 / float16 casts may drop a NaN's sign bit: (+NaN, -NaN)
NAN_BITS = {torch.float32: (0x7FC00000, -0x400000), torch.bfloat16: (0x7FC0, -0x40), torch.float16: (0x7E00, -0x200)}
NAN, NEG_NAN = "nan", "-nan"
SPECIALS = (NAN, NEG_NAN, math.inf, -math.inf, 0.0, -0.0, 2.0**-149, -(2.0**-149), 2.0**-133, 2.0**-24)
SPECIALS += (-(2.0**-24), 1.0, -1.0, 2.0, 3.0, -2.0)
entries = st.sampled_from(SPECIALS)


def tensor(rows: list[list[float | str]], dtype: torch.dtype) -> torch.Tensor:
    """``[B, n]`` of ``dtype``; ``"nan"`` / ``"-nan"`` entries get a NaN bit pattern with that sign."""
    out = torch.tensor([[0.0 if isinstance(v, str) else v for v in row] for row in rows], dtype=dtype)
    bits = out.view(BITS[dtype])
    for b, row in enumerate(rows):
        for i, v in enumerate(row):
            if isinstance(v, str):
                bits[b, i] = NAN_BITS[dtype][v == NEG_NAN]
    return out


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and torch.equal(a.view(BITS[a.dtype]), b.view(BITS[b.dtype]))


# ---- the oracle's order -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@settings(max_examples=150, deadline=None)
@given(data=st.data(), n=st.integers(1, 12), batch=st.integers(1, 3))
def test_top_k_ids_matches_plain_python(dtype, data, n, batch):
    rows = data.draw(st.lists(st.lists(entries, min_size=n, max_size=n), min_size=batch, max_size=batch))
    logits = tensor(rows, dtype)
    held = logits.float().tolist()  # the row as the dtype holds it (subnormals may flush, ties may appear)
    for k in range(1, n + 1):
        assert top_k_ids(logits, k).tolist() == [py_top_k(row, k) for row in held], f"k={k}"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_order_nan_first_then_descending_then_lower_column(dtype):
    logits = tensor([[1.0, -0.0, NAN, 0.0, NEG_NAN, math.inf, 1.0, -math.inf]], dtype)
    assert top_k_ids(logits, 8).tolist() == [[2, 4, 5, 0, 6, 1, 3, 7]]
    assert top_k_ids(logits, 3).tolist() == [[2, 4, 5]]


def test_large_tied_rows_match_plain_python():
    """Many columns tied at the k-th value: the lowest columns must be the ones taken."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.randint(-3, 4, (2, 50_000), generator=gen).to(torch.float16)
    logits[0, 1234], logits[1, 49_999] = torch.nan, -0.0
    for k in (1, 7, 300):
        assert top_k_ids(logits, k).tolist() == [py_top_k(row, k) for row in logits.float().tolist()]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_classic_values_are_the_logits_bits(dtype):
    logits = tensor([[NEG_NAN, -0.0, 0.0, 2.0**-24, -math.inf], [0.0, -0.0, NAN, -1.0, NEG_NAN]], dtype)
    ids, values = classic_top_k(logits, 5)
    assert ids.dtype == torch.int64 and ids.tolist() == [[0, 3, 1, 2, 4], [2, 4, 0, 1, 3]]
    assert same_bits(values, logits.gather(1, ids))


def test_classic_maps_ids_through_d2t_and_keeps_values():
    logits = torch.tensor([[0.5, 2.0, -1.0, 2.0]])
    d2t = torch.tensor([10, 3, 0, 2])  # draft id j is target j + d2t[j]: 0 -> 10, 1 -> 4, 2 -> 2, 3 -> 5
    ids, values = classic_top_k(logits, 3, d2t, target_vocab=20)
    assert ids.tolist() == [[4, 5, 10]]
    assert values.tolist() == [[2.0, 2.0, 0.5]]
    with pytest.raises(InvalidInput, match="target_vocab is required with d2t"):
        classic_top_k(logits, 1, d2t)
    with pytest.raises(InvalidInput, match="not injective"):
        classic_top_k(logits, 1, torch.tensor([1, 0, 0, 0]), target_vocab=20)


def test_classic_orders_ties_by_target_id_as_the_scatter_does():
    logits = torch.tensor([[2.0, 2.0, 1.0]])
    d2t = torch.tensor([5, 0, 1])  # 0 -> 5, 1 -> 1, 2 -> 3: draft ids 0 < 1 tie, their targets 5 > 1 are inverted
    assert classic_top_k(logits, 2, d2t, target_vocab=8)[0].tolist() == [[1, 5]]
    assert classic_top_k(logits, 2, d2t, target_vocab=8, mapped_only=True)[0].tolist() == [[1, 5]]


def test_classic_minus_inf_slots_take_the_lowest_targets_and_mapped_only_the_lowest_mapped_ones():
    logits = torch.tensor([[-math.inf, 1.0, -math.inf]])
    d2t = torch.tensor([3, 4, 4])  # 0 -> 3, 1 -> 5, 2 -> 6; targets 0, 1, 2, 4 and 7 are unmapped
    ids, values = classic_top_k(logits, 3, d2t, target_vocab=8)
    assert ids.tolist() == [[5, 0, 1]] and values.tolist() == [[1.0, -math.inf, -math.inf]]
    ids, values = classic_top_k(logits, 3, d2t, target_vocab=8, mapped_only=True)
    assert ids.tolist() == [[5, 3, 6]] and values.tolist() == [[1.0, -math.inf, -math.inf]]


@pytest.mark.parametrize(
    ("k", "message"),
    [
        (9, "k=9 exceeds the logits vocabulary of 7 ids"),
        (8, "k=8 exceeds the logits vocabulary of 7 ids"),
        (0, "k must be an int >= 1, got 0"),
        (-1, "k must be an int >= 1, got -1"),
        (True, "k must be an int >= 1, got True"),
        (2.0, "k must be an int >= 1, got 2.0"),
    ],
)
def test_bad_k_is_refused_by_name(k, message):
    with pytest.raises(InvalidInput, match=message):
        classic_top_k(torch.zeros(2, 7), k)


# ---- local top-k and merge on a simulated group -------------------------------------------------------------------


def sharded_top_k(logits: torch.Tensor, shards: list[list[int]], k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Run local_top_k + merge_pairs with rank r holding the columns ``shards[r]``; check ranks agree and traffic."""

    def rank_fn(group):
        gids = torch.tensor(sorted(shards[group.rank]), dtype=torch.int64)
        values, ids = local_top_k(logits[:, gids], gids, k)
        assert values.shape == ids.shape == (logits.shape[0], k)
        return merge_pairs(values, ids, k, group)

    tp = len(shards)
    results, groups = run_simulated(rank_fn, tp)
    for values, ids in results[1:]:
        assert same_bits(values, results[0][0]) and torch.equal(ids, results[0][1])
    for group in groups:
        assert dict(group.traffic.bytes) == {"all_gather": logits.shape[0] * 2 * k * tp * 4}
    return results[0]


def assert_matches_classic(logits: torch.Tensor, shards: list[list[int]], k: int) -> None:
    values, ids = sharded_top_k(logits, shards, k)
    want_ids, want_values = classic_top_k(logits, k)
    assert ids.dtype == torch.int64 and ids.tolist() == want_ids.tolist()
    assert same_bits(values, want_values), f"{values} vs {want_values}"


@settings(max_examples=60, deadline=None)
@given(data=st.data(), dtype=st.sampled_from(DTYPES), vocab=st.integers(1, 10), tp=st.integers(1, 4))
def test_merge_of_local_top_k_is_classic(data, dtype, vocab, tp):
    rows = data.draw(st.lists(st.lists(entries, min_size=vocab, max_size=vocab), min_size=1, max_size=3))
    owner = data.draw(st.lists(st.integers(0, tp - 1), min_size=vocab, max_size=vocab))  # any split, empty ranks too
    k = data.draw(st.integers(1, vocab))
    assert_matches_classic(tensor(rows, dtype), [[g for g in range(vocab) if owner[g] == r] for r in range(tp)], k)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_merge_edge_cases(dtype):
    contiguous = [[0, 1, 2], [3, 4, 5], [6], []]  # fewer than k tokens on rank 2, none on rank 3
    all_neg_inf = tensor([[-math.inf] * 7], dtype)
    assert_matches_classic(all_neg_inf, contiguous, 5)
    assert sharded_top_k(all_neg_inf, contiguous, 5)[1].tolist() == [[0, 1, 2, 3, 4]]
    nans = tensor([[1.0, NEG_NAN, 0.0, NAN, -0.0, NEG_NAN, math.inf]], dtype)  # NaNs on three ranks
    assert sharded_top_k(nans, contiguous, 4)[1].tolist() == [[1, 3, 5, 6]]
    assert_matches_classic(nans, contiguous, 7)
    ties = tensor([[0.0, 2.0, -0.0, 2.0, 0.0, -0.0, 2.0], [-math.inf, 1.0, -1.0, -math.inf, 1.0, -1.0, 1.0]], dtype)
    assert sharded_top_k(ties, contiguous, 6)[1].tolist() == [[1, 3, 6, 0, 2, 4], [1, 4, 6, 2, 5, 0]]
    assert_matches_classic(ties, [[5, 1], [], [0, 6, 3], [2, 4]], 7)  # interleaved ids: rank order is not id order


def test_local_top_k_fills_missing_slots_with_the_sentinel():
    values, ids = local_top_k(torch.tensor([[-math.inf, math.nan]]), torch.tensor([4, 9]), 4)
    assert ids.tolist() == [[9, 4, SENTINEL_ID, SENTINEL_ID]]
    assert math.isnan(values[0, 0]) and values[0, 1:].tolist() == [-math.inf] * 3
    values, ids = local_top_k(torch.empty(2, 0, dtype=torch.bfloat16), torch.empty(0, dtype=torch.int64), 3)
    assert values.dtype == torch.bfloat16 and ids.tolist() == [[SENTINEL_ID] * 3] * 2


def test_merge_refuses_k_above_the_tokens_held():
    with pytest.raises(InvalidInput, match="k=4 exceeds the 3 tokens"):
        sharded_top_k(torch.zeros(1, 3), [[0], [1, 2], []], 4)
