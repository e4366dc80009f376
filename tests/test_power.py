"""The suite proves its power: every shipped broken implementation is caught under ``ci``.

Each broken implementation runs through the same checks, strategies and pinned
edge cases as the real suite; the failure must name the rule that it breaks.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from properties import runner
from properties.cases import build
from properties.checks import BAD_INPUTS, check_rejects, check_token_exact
from properties.diagnose import ImplementationHung, PropertyFailure
from properties.runner import load_impl
from properties.strategies import cases, with_edge_cases
from tests.broken import EXPECTED_RULES

CAUGHT_BY = settings(
    settings.get_profile("ci"),
    phases=(Phase.explicit, Phase.generate),  # finding is the claim; shrinking is shown elsewhere
    report_multiple_bugs=False,
    suppress_health_check=list(HealthCheck),
)


def first_failure(name: str) -> str:
    impl = load_impl(f"tests.broken:{name}")

    @CAUGHT_BY
    @with_edge_cases
    @given(case=cases())
    def token_exact(case):
        check_token_exact(impl, build(case))

    @CAUGHT_BY
    @given(case=cases(), bad=st.sampled_from(sorted(BAD_INPUTS)))
    def rejects(case, bad):
        if case.vocab >= BAD_INPUTS[bad][2]:
            check_rejects(impl, build(case), bad)

    messages = []
    for prop in (token_exact, rejects):
        try:
            prop()
        except (PropertyFailure, ImplementationHung) as exc:
            messages.append(str(exc))
    return "\n\n".join(messages)


@pytest.mark.parametrize("name", sorted(EXPECTED_RULES))
def test_broken_implementation_is_caught(name, monkeypatch):
    monkeypatch.setattr(runner, "collective_timeout", 0.5)  # a hang must end the run, not stall it
    start = time.monotonic()
    message = first_failure(name)
    assert time.monotonic() - start < 60, "catching it took too long: did a hang get shrunk?"
    assert message, f"tests.broken:{name} passed every property: the suite lost its power"
    assert EXPECTED_RULES[name] in message, f"caught, but not for {EXPECTED_RULES[name]!r}:\n{message}"
    assert "replay: python -m properties.replay --impl tests.broken:" in message
