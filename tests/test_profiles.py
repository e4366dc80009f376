"""Profiles: a property on a process group runs its backend's share of the profile's examples."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from properties.harness.profiles import BACKEND_SHARE, PROPERTY_SHARE, backend_budget, budget


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


def test_the_ci_budgets_keep_what_each_property_ran_before_issue_40():
    """800 on sim, a restating property its share; on gloo 50, or 25 for a restating argmax property; the samplers'
    properties their issue 38 counts (75 and 12 for exactness): no property runs fewer examples than at 300."""
    assert (budget("test_token_exact", "sim"), budget("test_token_exact", "gloo")) == (800, 50)
    assert (budget("test_tp_invariance", "sim"), budget("test_tp_invariance", "gloo")) == (200, 25)
    assert (budget("test_bytes_per_step", "sim"), budget("test_bytes_per_step", "gloo")) == (200, 25)
    assert (budget("test_sample_exact", "sim"), budget("test_sample_exact", "gloo")) == (75, 12)
    assert (budget("test_sample_support", "sim"), budget("test_sample_support", "gloo")) == (19, 3)
