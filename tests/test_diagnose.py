"""Rules are named from evidence: each hand-built row below invites a wrong attribution, and must not get it.

The shipped broken implementations here return the id next to the expected
one, or a zero of the other sign, for a reason other than an id bug.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from properties.case_tensors import build
from properties.cases import Case
from properties.checks import check_token_exact, check_tp_invariance
from properties.diagnose import PropertyFailure
from sharded.impls import Impl, load_impl

NAN, TINY = float("nan"), torch.finfo(torch.float32).smallest_normal * torch.finfo(torch.float32).eps


def row_of_logits(values: list[float], scale: float = 1.0):
    """One row whose raw logits are ``values`` (zero weights, the values as bias), split in half over tp 2."""
    case = Case(batch=1, hidden=3, vocab=len(values), tp=2, padding_size=len(values), bias=True, scale=scale)
    inputs = build(case)
    return replace(
        inputs,
        weight=torch.zeros_like(inputs.weight),
        bias=torch.tensor(values),
        pad_weight=torch.zeros(3),
        pad_bias=torch.tensor(-1e30),
    )


def rule(impl: str, inputs) -> str:
    with pytest.raises(PropertyFailure) as failure:
        check_token_exact(load_impl(f"tests.broken:{impl}"), inputs)
    return str(failure.value).splitlines()[0]


def test_a_skipped_nan_next_to_the_winner_is_a_nan_fault_not_an_off_by_one():
    assert rule("nan_ignored", row_of_logits([0.0, 1.0, NAN, 2.0])) == (
        "[NaN not treated as the maximum: the first NaN must win]"
    )


def test_a_flushed_subnormal_next_to_the_winner_is_not_an_off_by_one():
    got = rule("subnormals_flushed", row_of_logits([-5.0, 0.0, 2 * TINY, -5.0]))
    assert got == "[chose a non-maximal logit]"


def test_zeros_of_both_signs_that_differ_before_rounding_are_not_called_signed_zero():
    # -tiny and +tiny round to -0.0 and +0.0 under the scale of 0.5; in float64 they stay apart
    inputs = row_of_logits([-5.0, -TINY, TINY, -5.0], scale=0.5)
    assert rule("logits_in_float64", inputs) == "[chose a non-maximal logit]"
    assert rule("key_without_zero_canon", inputs) == "[chose a non-maximal logit]"  # the same evidence
    genuine = row_of_logits([-5.0, -TINY, 0.0, TINY], scale=0.5)  # a +0.0 that is zero before rounding too
    assert rule("key_without_zero_canon", genuine) == "[signed zero: -0.0 and +0.0 tie, and the first of them must win]"


def test_an_off_by_one_is_named_when_nothing_else_explains_it():
    assert rule("off_by_one_at_shard_start", row_of_logits([0.0, 1.0, 3.0, 2.0])) == (
        "[global id off by one (draft id 2 reported as 1)]"
    )


def test_an_unproven_rule_prints_both_values_with_their_bits():
    message = str(
        pytest.raises(
            PropertyFailure,
            check_token_exact,
            load_impl("tests.broken:subnormals_flushed"),
            row_of_logits([-5.0, 0.0, 2 * TINY, -5.0]),
        ).value
    )
    assert "logit 2.802596928649634e-45 (bits 0x00000002)" in message and "logit 0.0 (bits 0x00000000)" in message
    assert "the chosen id is the first maximum of the logits with subnormals flushed to zero" in message


def wrong_at_tp_4(**kwargs):
    """Right at every tp but 4, where it answers id 0."""
    tokens = load_impl("vllm_pairs").fn(**kwargs)
    return torch.zeros_like(tokens) if kwargs["group"].world_size == 4 else tokens


def test_a_tp_invariance_failure_replays_on_the_side_that_went_wrong():
    """The repro holds the wrong side (tp 4 here) and, as ``tps``, the side it is compared with."""
    impl = Impl("tests.test_diagnose:wrong_at_tp_4", wrong_at_tp_4)
    inputs = build(Case(batch=2, hidden=4, vocab=300, tp=2, seed=3))
    with pytest.raises(PropertyFailure) as caught:
        check_tp_invariance(impl, inputs, [4])
    record = caught.value.repro
    assert (record["inputs"].tp, record["extra"]["tps"]) == (4, [2])
    with pytest.raises(PropertyFailure):
        check_tp_invariance(impl, record["inputs"], record["extra"]["tps"])
