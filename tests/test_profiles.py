"""Profiles: a property on a process group runs its backend's share of the profile's examples."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from properties.profiles import BACKEND_SHARE, backend_budget


def test_a_process_group_gets_its_share_and_the_settings_come_back():
    calls: list[int] = []

    @settings(max_examples=40, database=None, derandomize=True)
    @given(st.integers(0, 2**60))
    def prop(x):
        calls.append(x)

    with backend_budget(prop, "gloo"):
        prop()
    assert len(calls) == round(40 * BACKEND_SHARE["gloo"])
    calls.clear()
    prop()
    assert len(calls) == 40
