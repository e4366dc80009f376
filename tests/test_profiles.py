"""Profiles: a property on a process group runs its backend's share of the profile's examples."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from properties.profiles import BACKEND_SHARE, PROPERTY_SHARE, backend_budget


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


def test_a_corollary_property_gets_its_share_on_every_backend():
    calls: list[int] = []

    @settings(max_examples=40, database=None, derandomize=True)
    @given(st.integers(0, 2**60))
    def test_top_k_determinism(x):
        calls.append(x)

    with backend_budget(test_top_k_determinism, "sim"):
        test_top_k_determinism()
    assert len(calls) == round(40 * PROPERTY_SHARE["test_top_k_determinism"])
    calls.clear()
    with backend_budget(test_top_k_determinism, "gloo"):
        test_top_k_determinism()
    assert len(calls) == round(40 * PROPERTY_SHARE["test_top_k_determinism"] * BACKEND_SHARE["gloo"])
