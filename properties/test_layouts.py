"""The layouts the field ships beyond one even split, and ranks that must agree (spec section 13; docs/contract.md).

* **Inputs that differ per rank**: each rank's copy of the hidden states a few ulps from the others' (an
  all-reduce that does not reduce alike everywhere).  Every rank returns the same tokens, and each token is the
  classic path's on the logits each rank computed for its own shard.
* **Attention data parallel**: rank r owns a segment of the batch's rows (uneven, empty ones too), the head is
  vocab-parallel over the same ranks, and each rank returns its own rows' tokens (``dp_rows``).
* **Uneven shards**: base ids cut into columns of unequal width (no padding, padding to 64 or 64 * tp, seeded
  widths), for the argmax and the top-k.

``--layouts`` leaves out the layouts an implementation does not take; one without a ``dp_rows`` keyword skips
attention data parallel, saying so.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from properties.argmax.checks import check_token_exact, run_checked
from properties.argmax.top_k import check_top_k_exact
from properties.cases.case import Case
from properties.harness.runner import prepare
from properties.strategies import MAX_K, layout_cases, with_edge_cases

RANKS_AGREE = "ranks agree: every rank returns the same tokens, whatever its copy of the inputs"
EXACT_DIVERGED = "exact under divergence: the classic path's token on the logits each rank computed for its shard"
DP_EXACT = "attention data parallel: each rank returns its own rows' tokens, the classic path's"
UNEVEN_EXACT = "uneven shards: the classic path's token on a head cut into shards of unequal width"

DIVERGED = (
    Case(batch=8, hidden=6, vocab=1000, tp=4, weights="normal", ties=("across_ranks",), rank_ulps=2, seed=1),
    Case(batch=8, hidden=6, vocab=200, tp=2, ties=("shard_boundary",), rank_ulps=1, seed=3),
    Case(batch=6, hidden=5, vocab=500, tp=4, dtype="bfloat16", ties=("across_ranks",), rank_ulps=4, seed=12),
    # ties across ranks where a term each rank computes from its own copy decides them (a selector's lattice adds
    # one to the gathered logits: SGLang's DFlash2 walk disagrees here, on 6 of 120 such seeded heads)
    Case(batch=8, hidden=6, vocab=400, tp=2, ties=("across_ranks",), rank_ulps=2, seed=12),
)
DP = (
    Case(batch=7, hidden=4, vocab=300, tp=4, dp="skewed", seed=5),  # rows per rank (1, 5, 1, 0)
    Case(batch=3, hidden=4, vocab=7, tp=8, dp="balanced", padding="above_max"),  # 5 empty segments, 7 padding ranks
    Case(batch=8, hidden=5, vocab=1010, tp=2, added=16, ties=("added_tie",), dp="balanced", seed=9),
)
UNEVEN = (
    Case(batch=4, hidden=5, vocab=1001, tp=2, shards="split", ties=("shard_boundary",)),  # widths [501, 500]
    Case(batch=4, hidden=5, vocab=1000, tp=3, shards="pad64", bias=True, specials=("all_negative",)),
    Case(batch=4, hidden=5, vocab=1000, tp=4, shards="pad64tp", padding="above_max", seed=4),
    Case(batch=4, hidden=5, vocab=5000, tp=3, shards="skewed", ties=("across_ranks",), d2t="eagle3", target_extra=300),
)


@pytest.mark.layout("diverged")
@with_edge_cases(cases=DIVERGED)
@given(case=layout_cases("diverged"))
def test_ranks_agree(impl, backend, case):
    run_checked(impl, prepare(case, backend), RANKS_AGREE)


@pytest.mark.layout("diverged")
@with_edge_cases(cases=DIVERGED)
@given(case=layout_cases("diverged"))
def test_exact_under_divergence(impl, backend, case):
    check_token_exact(impl, prepare(case, backend), EXACT_DIVERGED)


@pytest.mark.layout("dp")
@with_edge_cases(cases=DP)
@given(case=layout_cases("dp"))
def test_attention_dp_rows(impl, backend, case):
    check_token_exact(impl, prepare(case, backend), DP_EXACT)


@pytest.mark.own_head
@pytest.mark.layout("uneven")
@with_edge_cases(cases=UNEVEN)
@given(case=layout_cases("uneven"))
def test_uneven_shards(impl, backend, case):
    check_token_exact(impl, prepare(case, backend), UNEVEN_EXACT)


@pytest.mark.own_head
@pytest.mark.layout("uneven")
@with_edge_cases(cases=UNEVEN, k=4)
@given(case=layout_cases("uneven"), k=st.integers(1, MAX_K))
def test_top_k_uneven_shards(topk_impl, backend, case, k):
    inputs = prepare(case, backend)
    check_top_k_exact(topk_impl, inputs, min(k, inputs.vocab))
