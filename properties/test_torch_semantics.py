"""torch.argmax (and max over a dim) must keep the semantics both paths rely on.

Checked against a pure-Python argmax on small rows: first maximum, NaN is the
maximum, and -0.0 ties with +0.0.
"""

from __future__ import annotations

import torch
from hypothesis import example, given
from hypothesis import strategies as st

from properties.cases import DTYPES
from reference.pyargmax import py_argmax

SPECIALS = (float("nan"), -float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 5e-324, 1e-40, 3e38, 1.0)
values = st.one_of(st.sampled_from(SPECIALS), st.floats(width=32), st.integers(-3, 3).map(float))


@example(row=[1.0, float("nan"), 3.0, float("nan")], dtype="float32")
@example(row=[-0.0, 0.0], dtype="float32")
@example(row=[0.0, -0.0], dtype="bfloat16")
@example(row=[float("-inf")] * 3, dtype="float16")
@given(row=st.lists(values, min_size=1, max_size=16), dtype=st.sampled_from(tuple(DTYPES)))
def test_torch_argmax_matches_pure_python(row, dtype):
    t = torch.tensor(row, dtype=torch.float32).to(DTYPES[dtype])
    want = py_argmax(t.float().tolist())  # the values as the dtype holds them
    got_argmax = int(torch.argmax(t))
    got_max = int(t.max(dim=0).indices)
    assert got_argmax == want, f"torch.argmax({t.tolist()}) = {got_argmax}, first maximum is {want}"
    assert got_max == want, f"torch.max(dim=0) on {t.tolist()} picked {got_max}, first maximum is {want}"
