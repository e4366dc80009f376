"""Token-exact equivalence of the local path with the classic path, and its corollaries."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from properties.cases import build
from properties.checks import (
    check_determinism,
    check_output_contract,
    check_row_independence,
    check_token_exact,
    check_tp_invariance,
)
from properties.strategies import cases, with_edge_cases


@with_edge_cases
@given(case=cases())
def test_token_exact(impl, case):
    check_token_exact(impl, build(case))


@with_edge_cases
@given(case=cases())
def test_output_contract(impl, case):
    check_output_contract(impl, build(case))


@given(case=cases(int_weights=True))
def test_tp_invariance(impl, case):
    check_tp_invariance(impl, build(case))


@given(case=cases(int_weights=True), data=st.data())
def test_row_independence(impl, case, data):
    rows = data.draw(st.lists(st.integers(0, case.batch - 1), min_size=1, max_size=case.batch), label="rows")
    check_row_independence(impl, build(case), rows)


@given(case=cases())
def test_determinism(impl, case):
    check_determinism(impl, build(case))
