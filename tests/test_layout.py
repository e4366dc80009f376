"""vLLM's vocab-parallel layout: base and added blocks, padding, the logits vocabulary, clear errors."""

from __future__ import annotations

import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from reference.head import NOT_A_ROW, SHARD_RULES, row_ids, shard_widths, uneven_row_ids
from sharded.layout import every_rank, uneven_layout, vocab_parallel_layout


def test_rank_of_padding_only():
    rank0, rank1 = vocab_parallel_layout(7, 2)
    assert (rank0.start, rank0.num_real, rank0.num_padding, rank0.size) == (0, 7, 25, 32)
    assert (rank1.start, rank1.num_real, rank1.num_padding, rank1.num_added) == (32, 0, 32, 0)


def test_padding_on_last_rank_only():
    layouts = vocab_parallel_layout(32001, 4)
    assert [(lay.start, lay.num_real, lay.num_padding) for lay in layouts] == [
        (0, 8016, 0),
        (8016, 8016, 0),
        (16032, 8016, 0),
        (24048, 7953, 63),
    ]


def test_vllm_docstring_example():
    """1010 base ids, 16 added, padding 64: 1088 rows; at tp 2 rank 0 holds every added id."""
    rank0, rank1 = vocab_parallel_layout(1010, 2, added_vocab=16)
    assert rank0.padded_vocab == 1088 and rank0.size == 544
    assert (rank0.start, rank0.num_real, rank0.added_row, rank0.added_start, rank0.num_added) == (0, 512, 512, 1010, 16)
    assert (rank1.start, rank1.num_real, rank1.added_row, rank1.added_start, rank1.num_added) == (
        512,
        498,
        512,
        1042,
        0,
    )
    assert rank0.row_of(1025) == 527 and rank1.row_of(1010) is None and rank1.row_of(1009) == 497


def test_logits_vocabulary_below_the_base():
    """A checkpoint with more rows than tokens: ids at or above the logits vocabulary are not tokens."""
    rank0, rank1 = vocab_parallel_layout(1024, 2, added_vocab=5, padding_size=128, logits_vocab=1000)
    assert (rank0.num_real, rank1.num_real, rank1.base_real, rank0.num_added, rank0.added_real) == (512, 488, 512, 0, 5)
    assert rank0.vocab == 1000 and rank0.padded_vocab == 1152


def test_tp_that_cannot_split_the_head():
    with pytest.raises(ValueError, match=r"tp=3 cannot split this head: the 128 padded base rows"):
        vocab_parallel_layout(100, 3)
    with pytest.raises(
        ValueError, match=r"tp=2 cannot split .* 6 padded base rows .* 3 padded added rows \(added_vocab 1\)"
    ):
        vocab_parallel_layout(6, 2, added_vocab=1, padding_size=3)


@pytest.mark.parametrize(
    "args, kw, word",
    [
        ((0, 2), {}, "org_vocab"),
        ((10, 0), {}, "tp"),
        ((10, 2), {"padding_size": 0}, "padding_size"),
        ((10.0, 2), {}, "org_vocab"),
        ((True, 1), {}, "org_vocab"),
        ((10, 2), {"added_vocab": -1}, "added_vocab"),
        ((10, 2), {"logits_vocab": 11}, "logits_vocab 11 exceeds"),
        ((10, 2), {"logits_vocab": 0}, "logits_vocab"),
    ],
)
def test_bad_arguments(args, kw, word):
    with pytest.raises(ValueError, match=word):
        vocab_parallel_layout(*args, **kw)


@given(
    org=st.integers(1, 5000),
    added=st.integers(0, 300),
    padding=st.sampled_from((64, 96, 128)),
    cut=st.integers(0, 400),
    data=st.data(),
)
def test_layout_agrees_with_the_oracles_row_ids(org, added, padding, cut, data):
    """Two derivations of the same layout: the rank code's ranges and the oracle's row-by-row ids."""
    logits_vocab = max(1, org + added - cut)
    tp = data.draw(st.integers(1, 8), label="tp")
    try:
        layouts = vocab_parallel_layout(org, tp, added_vocab=added, padding_size=padding, logits_vocab=logits_vocab)
    except ValueError as exc:
        assert "cannot split" in str(exc)
        return
    ids = row_ids(org, added, padding, tp)
    for lay in layouts:
        rows = ids[lay.rank]
        tokens = ((rows != NOT_A_ROW) & (rows < logits_vocab)).nonzero().flatten()
        assert torch.equal(lay.token_rows(), tokens) and torch.equal(lay.token_ids(), rows[tokens])
        assert torch.equal(lay.id_at(torch.arange(len(tokens))), rows[tokens])  # the ids one at a time
        real = (rows != NOT_A_ROW).nonzero().flatten().tolist()
        assert len(rows) == lay.size and real == [r for r, t in enumerate(rows.tolist()) if lay.row_of(t) == r]
    assert sum(lay.num_real + lay.num_added for lay in layouts) == logits_vocab


@pytest.mark.parametrize(
    "vocab, tp, rule, widths",
    [
        (1001, 2, "split", (501, 500)),  # NVIDIA/TensorRT-LLM #18836's shards: rank 1's first id is 501
        (1000, 3, "pad64", (342, 341, 341)),  # 1024 columns over 3 ranks
        (1000, 4, "pad64tp", (256, 256, 256, 256)),  # padded to a multiple of 256
        (7, 2, "split", (4, 3)),
    ],
)
def test_uneven_rules_cut_the_columns_as_the_engines_do(vocab, tp, rule, widths):
    assert shard_widths(vocab, tp, rule) == widths


@settings(max_examples=200)  # a derivation of a few lines each side: the layout properties run it on every case too
@given(vocab=st.integers(8, 5000), cut=st.integers(0, 7), tp=st.integers(2, 8), data=st.data())
def test_uneven_layout_agrees_with_the_oracles_row_ids(vocab, cut, tp, data):
    """Uneven shards, two derivations: the rank code's ranges and the oracle's ids row by row."""
    rule, seed = data.draw(st.sampled_from(SHARD_RULES[1:]), label="rule"), data.draw(st.integers(0, 99), label="seed")
    widths = shard_widths(vocab, tp, rule, seed)
    assert len(widths) == tp and min(widths) >= 1 and sum(widths) >= vocab
    layouts = uneven_layout(vocab, widths, logits_vocab=vocab - cut)
    for lay, rows in zip(layouts, uneven_row_ids(widths, vocab), strict=True):
        tokens = ((rows != NOT_A_ROW) & (rows < vocab - cut)).nonzero().flatten()
        assert torch.equal(lay.token_rows(), tokens) and torch.equal(lay.token_ids(), rows[tokens])
        assert lay.size == len(rows) == widths[lay.rank] and every_rank(lay) == layouts
    assert sum(lay.num_real for lay in layouts) == vocab - cut


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: shard_widths(3, 4, "split"), "3 ids cannot give each of 4 ranks a column"),
        (lambda: shard_widths(30, 2, "even"), "shard rule must be one of"),
        (lambda: uneven_layout(10, (4, 5)), "widths [4, 5] cannot cut 10 ids"),
    ],
)
def test_an_uneven_head_that_cannot_be_cut_is_a_value_error_naming_it(call, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        call()


def test_the_gathered_row_of_uneven_shards_is_every_id_in_order():
    """The glue that hands kernels the classic path's gathered logits (``sharded.local_sampling.gathered_logits``):
    uneven shards travel padded to the widest, so each rank's columns land at their ids (a collective of unequal
    shapes would abort a real group)."""
    from groups.simulated import run_simulated
    from sharded.local_sampling import gathered_logits

    layouts = uneven_layout(7, (4, 3))
    row = torch.arange(7, dtype=torch.float32).view(1, 7)

    def rank_fn(group):
        lay = layouts[group.rank]
        logits = torch.full((1, lay.size), float("nan"))
        logits[:, lay.token_rows(torch.device("cpu"))] = row[:, lay.token_ids(torch.device("cpu"))]
        return gathered_logits(logits, lay, group, None)[0]

    results, _ = run_simulated(rank_fn, 2, 60.0)
    assert all(torch.equal(r, row) for r in results)
