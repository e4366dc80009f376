"""Communication accounting: the exact bytes each rank receives per step, by formula.

``all_gather`` counts its whole result and ``all_reduce`` its buffer (see
``sharded.group.Traffic``), on the simulated group and on gloo alike.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from properties.harness.runner import prepare, run_ranks
from properties.strategies import MAX_K, cases
from sharded.impls import load_impl

FORMULAS = {
    # [tp, B, 2] float32 (value, id) pairs, gathered once
    "vllm_pairs": lambda b, tp, padded, itemsize: {"all_gather": b * 2 * tp * 4},
    # [B] int64 keys, reduced once: independent of tp and of the vocabulary
    "packed_key": lambda b, tp, padded, itemsize: {"all_reduce": b * 8},
    # every padded logit of every rank, in the head's dtype
    "classic_gather": lambda b, tp, padded, itemsize: {"all_gather": b * padded * itemsize},
}


@pytest.mark.parametrize("name", sorted(FORMULAS))
@given(case=cases())
def test_bytes_per_step(name, backend, case):
    inputs = prepare(case, backend)
    _, traffic = run_ranks(load_impl(name), inputs)
    lay = inputs.layouts[0]
    want = FORMULAS[name](case.batch, inputs.tp, lay.padded_vocab, inputs.weight.element_size())
    for rank, t in enumerate(traffic):
        assert dict(t.bytes) == want, f"{name} on {backend} rank {rank} moved {dict(t.bytes)}, expected {want}"
        assert sum(t.calls.values()) == 1, f"{name} made {dict(t.calls)} collective calls; one is the design"


TOPK_FORMULAS = {
    # [tp, B, k, 2] float32 (value, id) pairs, gathered once: independent of the vocabulary
    "topk_pairs": lambda b, tp, k: {"all_gather": b * 2 * k * tp * 4},
}


@pytest.mark.parametrize("name", sorted(TOPK_FORMULAS))
@given(case=cases(), k=st.integers(1, MAX_K))
def test_top_k_bytes_per_step(name, backend, case, k):
    inputs = prepare(case, backend)
    k = min(k, inputs.vocab)
    _, traffic = run_ranks(load_impl(name), inputs, lambda kw: {**kw, "k": k})
    want = TOPK_FORMULAS[name](case.batch, inputs.tp, k)
    for rank, t in enumerate(traffic):
        assert dict(t.bytes) == want, f"{name} on {backend} rank {rank} moved {dict(t.bytes)}, expected {want}"
        assert sum(t.calls.values()) == 1, f"{name} made {dict(t.calls)} collective calls; one is the design"
