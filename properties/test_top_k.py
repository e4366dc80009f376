"""Vocab-parallel top-k against the classic top-k: ids in order, values bit for bit, and its corollaries.

``k`` runs from 1 to 8 (never above the logits vocabulary) over every case the argmax properties draw.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from properties.argmax.top_k import (
    check_top1_is_argmax,
    check_top_k_contract,
    check_top_k_determinism,
    check_top_k_exact,
)
from properties.cases.case import Case
from properties.harness.runner import prepare, run_ranks
from properties.strategies import MAX_K, cases, with_edge_cases

widths = st.integers(1, MAX_K)


@with_edge_cases(k=3)
@given(case=cases(), k=widths)
def test_top_k_exact(topk_impl, backend, case, k):
    inputs = prepare(case, backend)
    check_top_k_exact(topk_impl, inputs, min(k, inputs.vocab))


@with_edge_cases(k=8)
@given(case=cases(), k=widths)
def test_top_k_contract(topk_impl, backend, case, k):
    inputs = prepare(case, backend)
    check_top_k_contract(topk_impl, inputs, min(k, inputs.vocab))


@given(case=cases(), k=widths)
def test_top1_is_the_argmax_token(topk_impl, impl, backend, case, k):
    inputs = prepare(case, backend)
    check_top1_is_argmax(topk_impl, impl, inputs, min(k, inputs.vocab))


@given(case=cases(), k=widths)
def test_top_k_determinism(topk_impl, backend, case, k):
    inputs = prepare(case, backend)
    check_top_k_determinism(topk_impl, inputs, min(k, inputs.vocab))


@pytest.mark.own_head
def test_top_k_rejects_k_above_the_logits_vocabulary(topk_impl, backend):
    """k > L has no answer: a ValueError naming k, never a short or padded top-k."""
    inputs = prepare(Case(batch=2, hidden=4, vocab=5, tp=2, added=3, logits_vocab=6), backend)
    try:
        results, _ = run_ranks(topk_impl, inputs, lambda kw: {**kw, "k": 7})
    except ValueError as exc:
        assert "k=7" in str(exc), f"{topk_impl}: k=7 > L=6 rejected with an unclear message: {exc}"
        return
    raise AssertionError(f"{topk_impl}: k=7 above the logits vocabulary of 6 ids was accepted: {results[0]!r}")
