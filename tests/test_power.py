"""The suite proves its power: every property fails on a deliberately broken implementation.

Every broken implementation in tests/broken.py runs in-process through the
token-exact and bad-input checks with the ``ci`` profile's strategies and
pinned edge cases, and must fail for the rule it breaks. The other properties
run as the real suite does, in a subprocess with ``--impl``, each against a
broken implementation it must catch.
"""

from __future__ import annotations

import time

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from properties import runner
from properties.cases import build
from properties.checks import BAD_INPUTS, check_rejects, check_token_exact
from properties.diagnose import ImplementationHung, PropertyFailure
from properties.strategies import cases, with_edge_cases
from properties.test_torch_semantics import check_argmax
from sharded.impls import load_impl
from tests.broken import EXPECTED_RULES
from tests.suite import run_suite

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


# (test in properties/, broken implementation it must catch, words its failure output must contain)
SUITE_CATCHES = [
    ("test_output_contract", "no_padding_mask", "padding id returned"),
    ("test_tp_invariance", "highest_rank_wins", "TP invariance: tokens differ between"),
    ("test_row_independence", "batched_path_differs", "row independence: a row's token changed"),
    ("test_determinism", "alternating_tie_break", "nondeterminism: two runs on identical input differ"),
    ("test_all_neg_inf_row_with_offset_d2t", "highest_rank_wins", "the local path returns d2t[0]"),
    ("test_ids_beyond_float32_are_exact_or_rejected", "ids_in_bf16", "came back as 16777216"),
    ("test_the_flag_fires_exactly_on_non_monotone_tables", "d2t_skipped", "an increasing table, tie at"),
]


@pytest.mark.parametrize("test, name, words", SUITE_CATCHES, ids=[f"{t}-{n}" for t, n, _ in SUITE_CATCHES])
def test_property_fails_on_a_broken_implementation(test, name, words):
    out = run_suite("properties", "-k", test, "--impl", f"tests.broken:{name}", "--backend", "sim", profile="ci")
    assert out.returncode == 1, f"{test} passed on tests.broken:{name}:\n{out.stdout[-3000:]}{out.stderr[-2000:]}"
    assert words in out.stdout, out.stdout[-5000:]


def last_index_argmax(t):
    return int(t.shape[0] - 1 - torch.argmax(t.flip(0)))


def test_torch_semantics_property_fails_on_a_last_index_argmax():
    @CAUGHT_BY
    @given(
        row=st.lists(st.sampled_from([0.0, -0.0, 1.0, float("nan")]), min_size=1, max_size=8),
        dtype=st.sampled_from(["float32", "bfloat16"]),
    )
    def semantics(row, dtype):
        check_argmax(last_index_argmax, row, dtype)

    with pytest.raises(AssertionError, match="the first maximum is"):
        semantics()
