"""The packed int64 key orders exactly like (value, then smaller id), with +-0 and NaN canonical."""

from __future__ import annotations

import math
import struct

import torch
from hypothesis import given
from hypothesis import strategies as st

from sharded.keys import decode_ids, encode_keys

values = st.floats(width=32) | st.sampled_from((0.0, -0.0, math.inf, -math.inf, math.nan, -math.nan))


def _rank(value: float, ident: int) -> tuple:
    """What argmax prefers: NaN above all, -0 == +0, then the smaller id."""
    return (1, 0.0, -ident) if math.isnan(value) else (0, value + 0.0, -ident)


@given(a=values, b=values, ia=st.integers(0, 2**32 - 1), ib=st.integers(0, 2**32 - 1))
def test_key_order_matches_argmax_preference(a, b, ia, ib):
    keys = encode_keys(torch.tensor([a, b]), torch.tensor([ia, ib]))
    assert decode_ids(keys).tolist() == [ia, ib]
    want = (_rank(a, ia) > _rank(b, ib)) - (_rank(a, ia) < _rank(b, ib))
    got = (int(keys[0]) > int(keys[1])) - (int(keys[0]) < int(keys[1]))
    assert got == want, f"keys order ({a}, {ia}) vs ({b}, {ib}) as {got}, argmax prefers {want}"


def test_without_canonicalisation_the_key_breaks_ties_and_nan():
    neg_nan = struct.unpack("<f", struct.pack("<I", 0xFFC00000))[0]
    zeros = encode_keys(torch.tensor([-0.0, 0.0]), torch.tensor([0, 1]), canonical_zero=False)
    assert int(zeros[1]) > int(zeros[0])  # +0 beats -0: the wrong id wins the tie
    nan = encode_keys(torch.tensor([neg_nan, -math.inf]), torch.tensor([0, 1]), canonical_nan=False)
    assert int(nan[1]) > int(nan[0])  # a sign-bit NaN sorts below -inf
