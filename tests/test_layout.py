"""vLLM's vocab-parallel layout: padding at the end, padding-only ranks, clear errors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sharded.layout import ShardLayout, vocab_parallel_layout


def test_rank_of_padding_only():
    assert vocab_parallel_layout(7, 2) == (
        ShardLayout(vocab=7, padded_vocab=64, tp=2, rank=0, start=0, num_real=7, num_padding=25),
        ShardLayout(vocab=7, padded_vocab=64, tp=2, rank=1, start=32, num_real=0, num_padding=32),
    )


def test_padding_on_last_rank_only():
    layouts = vocab_parallel_layout(32001, 4)
    assert [(lay.start, lay.num_real, lay.num_padding) for lay in layouts] == [
        (0, 8016, 0),
        (8016, 8016, 0),
        (16032, 8016, 0),
        (24048, 7953, 63),
    ]


def test_multiple_of_64_has_no_padding():
    assert all(lay.num_padding == 0 for lay in vocab_parallel_layout(151936, 8))


def test_tp_that_does_not_divide_the_padded_vocab():
    with pytest.raises(ValueError, match=r"tp=3 does not divide the padded vocabulary 128"):
        vocab_parallel_layout(100, 3)


@pytest.mark.parametrize("args", [(0, 2), (10, 0), (10, 2, 0), (10.0, 2), (True, 1)])
def test_bad_arguments(args):
    with pytest.raises(ValueError, match="must be a positive int"):
        vocab_parallel_layout(*args)


@given(vocab=st.integers(1, 300_000), tp=st.sampled_from((1, 2, 4, 8)))
def test_layout_tiles_the_padded_vocab(vocab, tp):
    layouts = vocab_parallel_layout(vocab, tp)
    padded = layouts[0].padded_vocab
    assert padded % 64 == 0 and padded - 64 < vocab <= padded
    assert [lay.start for lay in layouts] == [r * padded // tp for r in range(tp)]
    assert {lay.size for lay in layouts} == {padded // tp}
    assert sum(lay.num_real for lay in layouts) == vocab
    real_ends = [lay.start + lay.num_real for lay in layouts if lay.num_real]
    assert real_ends[-1] == vocab  # real ids are contiguous from 0: padding only follows them
    assert all(lay.num_real == 0 for lay in layouts[len(real_ends) :])
