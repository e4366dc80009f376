"""The named divergence, shown and never hidden.

An all ``-inf`` row with ``d2t[0] != 0``: the classic path's argmax over its
``-inf``-filled target row says target 0 (a token that may not even be in the
draft vocabulary), while the local path maps its winner, draft id 0, to
``d2t[0]``.  The built-ins must show exactly that; another implementation may
return either of the two.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from properties.argmax.checks import run_checked
from properties.cases.case import Case
from properties.harness.runner import prepare
from properties.oracle import answer
from sharded.local_argmax import BUILTINS

PROP = "named divergence on all -inf rows"


@pytest.mark.own_head
@given(
    vocab=st.integers(1, 3000),
    tp=st.sampled_from((1, 2, 4, 8)),
    extra=st.integers(1, 500),
    seed=st.integers(0, 2**32 - 1),
)
def test_all_neg_inf_row_with_offset_d2t(impl, backend, vocab, tp, extra, seed):
    case = Case(
        batch=3,
        hidden=4,
        vocab=vocab,
        tp=tp,
        seed=seed,
        bias=True,
        specials=("neg_inf_rows",),
        d2t="eagle3",
        target_extra=extra,
    )
    inputs = prepare(case, backend)
    hidden, d2t = inputs.hidden.clone(), inputs.d2t
    hidden[:, 1] = float("inf")  # every row all -inf
    if int(d2t[0]) == 0:  # make the divergence visible: shift every draft id one target up
        d2t = torch.ones_like(d2t)
    inputs = replace(inputs, hidden=hidden, d2t=d2t)  # new tensors, a new Inputs: nothing derived is kept
    d2t0 = int(d2t[0])
    oracle = answer(inputs).tokens
    assert torch.equal(oracle, torch.zeros_like(oracle)), f"oracle should return target 0, got {oracle.tolist()}"
    tokens = run_checked(impl, inputs, PROP).tolist()
    allowed = {d2t0} if impl.spec in BUILTINS else {0, d2t0}
    assert set(tokens) <= allowed, (
        f"{impl}: all -inf rows gave {tokens}; the local path returns d2t[0] = {d2t0}, the oracle 0"
    )
