"""Token-exact equivalence of the local path with the classic path, and its corollaries."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from properties.argmax.checks import (
    check_determinism,
    check_output_contract,
    check_row_independence,
    check_token_exact,
    check_tp_invariance,
)
from properties.harness.runner import backend_tps, prepare
from properties.strategies import cases, with_edge_cases


@with_edge_cases
@given(case=cases())
def test_token_exact(impl, backend, case):
    check_token_exact(impl, prepare(case, backend))


@with_edge_cases
@given(case=cases())
def test_output_contract(impl, backend, case):
    check_output_contract(impl, prepare(case, backend))


@given(case=cases(int_weights=True), data=st.data())
def test_tp_invariance(impl, backend, case, data):
    inputs = prepare(case, backend)
    others = [tp for tp in backend_tps(backend) if tp != inputs.tp]
    if others:  # a torchrun job has one tp only
        check_tp_invariance(impl, inputs, [data.draw(st.sampled_from(others), label="other tp")])


@given(case=cases(int_weights=True), data=st.data())
def test_row_independence(impl, backend, case, data):
    rows = data.draw(st.lists(st.integers(0, case.batch - 1), min_size=1, max_size=case.batch), label="rows")
    check_row_independence(impl, prepare(case, backend), rows)


@given(case=cases())
def test_determinism(impl, backend, case):
    check_determinism(impl, prepare(case, backend))
