"""torch.argmax (and max over a dim) must keep the semantics both paths rely on.

Checked against a pure-Python argmax on small rows: first maximum, NaN is the
maximum, and -0.0 ties with +0.0.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from groups.devices import case_device
from properties.cases.case import DTYPES
from properties.harness.settings import current
from reference.pyargmax import py_argmax

SPECIALS = (float("nan"), -float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 5e-324, 1e-40, 3e38, 1.0)
values = st.one_of(st.sampled_from(SPECIALS), st.floats(width=32), st.integers(-3, 3).map(float))


ARGMAXES = {"torch.argmax": lambda t: int(torch.argmax(t)), "torch.max(dim=0)": lambda t: int(t.max(dim=0).indices)}


def check_argmax(argmax, row: list[float], dtype: str) -> None:
    """``argmax`` on ``row`` (cast to ``dtype``, on the run's device) must pick what the pure-Python argmax picks."""
    t = torch.tensor(row, dtype=torch.float32, device=case_device(current().device)).to(DTYPES[dtype])
    want = py_argmax(t.float().tolist())  # the values as the dtype holds them
    got = argmax(t)
    assert got == want, f"argmax of {t.tolist()} ({dtype}) picked {got}; the first maximum is {want}"


@pytest.mark.parametrize("name", sorted(ARGMAXES))
@example(row=[1.0, float("nan"), 3.0, float("nan")], dtype="float32")
@example(row=[-0.0, 0.0], dtype="float32")
@example(row=[0.0, -0.0], dtype="bfloat16")
@example(row=[float("-inf")] * 3, dtype="float16")
@given(row=st.lists(values, min_size=1, max_size=16), dtype=st.sampled_from(tuple(DTYPES)))
def test_torch_argmax_matches_pure_python(name, row, dtype):
    check_argmax(ARGMAXES[name], row, dtype)
