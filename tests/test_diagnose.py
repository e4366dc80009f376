"""Rules are named from evidence: each hand-built row below invites a wrong attribution, and must not get it.

The broken implementations here return the id next to the expected one, a zero of the other sign, a later NaN
or another row's token, each for a reason the rule must name, and no other.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from properties.argmax import diagnosis as diagnose
from properties.argmax import faults
from properties.argmax.checks import check_token_exact, check_tp_invariance
from properties.cases.case import Case
from properties.cases.tensors import build
from properties.failures import PropertyFailure
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


def message(impl: str | Impl, inputs) -> str:
    with pytest.raises(PropertyFailure) as failure:
        check_token_exact(impl if isinstance(impl, Impl) else load_impl(f"tests.broken:{impl}"), inputs)
    return str(failure.value)


def rule(impl: str | Impl, inputs) -> str:
    return message(impl, inputs).splitlines()[0]


def test_a_skipped_nan_next_to_the_winner_is_a_nan_fault_not_an_off_by_one():
    assert rule("nan_ignored", row_of_logits([0.0, 1.0, NAN, 2.0])) == (
        "[NaN not treated as the maximum: the first NaN must win]"
    )


def test_a_flushed_subnormal_next_to_the_winner_is_not_an_off_by_one():
    got = rule("subnormals_flushed", row_of_logits([-5.0, 0.0, 2 * TINY, -5.0]))
    assert got == f"[{faults.SUBNORMALS}]"


def test_signed_zeros_are_the_signed_zero_rule_whatever_else_fits_too():
    """-tiny and +tiny round to -0.0 and +0.0 under the scale of 0.5: equal in the head's dtype, so a tie, and the
    zero rule is the most specific one that explains the choice (float64 logits would choose the same id: the
    message says so)."""
    inputs = row_of_logits([-5.0, -TINY, TINY, -5.0], scale=0.5)
    assert rule("key_without_zero_canon", inputs) == f"[{faults.SIGNED_ZERO}]"
    assert rule("logits_in_float64", inputs) == f"[{faults.SIGNED_ZERO}]"  # the same evidence, the same rule
    assert "with -0.0 ordered below +0.0 and computed in float64" in message("logits_in_float64", inputs)


def test_the_zero_rule_is_named_only_where_it_chooses_the_id():
    """A genuine +0.0 before a rounded +tiny: the key orders -0.0 below +0.0 and takes the first +0.0; float64
    logits take the +tiny.  Each gets its own rule."""
    inputs = row_of_logits([-5.0, -TINY, 0.0, TINY], scale=0.5)
    assert rule("key_without_zero_canon", inputs) == f"[{faults.SIGNED_ZERO}]"
    assert rule("logits_in_float64", inputs) == f"[{faults.NOT_ROUNDED}: computed in float64]"


def test_an_off_by_one_is_named_when_nothing_else_explains_it():
    assert rule("off_by_one_at_shard_start", row_of_logits([0.0, 1.0, 3.0, 2.0])) == (
        "[global id off by one (draft id 2 reported as 1)]"
    )


def test_a_rule_prints_both_values_with_their_bits():
    text = message("subnormals_flushed", row_of_logits([-5.0, 0.0, 2 * TINY, -5.0]))
    assert "logit 2.802596928649634e-45 (bits 0x00000002)" in text and "logit 0.0 (bits 0x00000000)" in text
    assert "the chosen id is the first maximum of the logits with subnormals flushed to zero" in text


def test_a_nan_that_loses_to_a_later_nan_is_a_nan_fault_not_a_rank_tie():
    """A shard reduced in blocks lets rank 0's NaN (in its second block) lose to its first block's number; rank 1's
    NaN then wins across ranks.  Two NaNs, the higher rank's chosen: the NaN rule is the one broken."""
    values = [0.0] * 32
    values[0], values[9], values[17] = 5.0, NAN, NAN
    assert rule("nan_lost_in_blocks", row_of_logits(values)) == f"[{diagnose.NAN_NOT_MAX}]"


def rolled(**kwargs):
    """Each row answers with the next row's token."""
    return torch.roll(load_impl("vllm_pairs").fn(**kwargs), -1)


def test_a_row_holding_another_rows_token_is_not_an_off_by_one():
    """Row 0 expects id 2 and row 1 id 3; row 0 gets 3, which is 2 + 1, and is row 1's token."""
    case = Case(batch=2, hidden=3, vocab=8, tp=2, padding_size=8, bias=True)
    inputs = replace(
        build(case),
        hidden=torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, 1.0]]),
        weight=torch.zeros(8, 3).index_put_((torch.tensor([3]), torch.tensor([2])), torch.tensor(100.0)),
        bias=torch.tensor([0.0, 0.0, 9.0, 1.0, 0.0, 0.0, 0.0, 0.0]),
    )
    got = rule(Impl("tests.test_diagnose:rolled", rolled), inputs)
    assert got == f"[{diagnose.ANOTHER_ROW}: rows shifted by 1: row 0 holds row 1's token]"


def test_an_uncapped_added_id_is_named_for_the_cap():
    """Base id 2's logit 10 caps to 1.99982; added id 4's 1.9999 would cap to 1.523, but left uncapped it wins."""
    case = Case(batch=1, hidden=3, vocab=4, tp=1, added=2, padding_size=6, bias=True, soft_cap=2.0)
    inputs = replace(build(case), weight=torch.zeros(6, 3), bias=torch.tensor([0.0, 1.0, 10.0, 0.5, 1.9999, 0.0]))
    assert rule("cap_base_rows_only", inputs) == f"[{faults.ADDED_UNCAPPED}: the soft cap left off]"


def test_a_float32_epilogue_on_a_bfloat16_head_is_named_for_rounding():
    """Ids 0 and 1 tie at 1.0078125 in bfloat16; in float32, id 1's 1.009765625 is larger."""
    case = Case(batch=1, hidden=3, vocab=4, tp=1, padding_size=4, bias=True, dtype="bfloat16")
    built = build(case)
    weight = torch.zeros(4, 3, dtype=torch.bfloat16)
    weight[:2, 2] = 1.0078125
    inputs = replace(
        built,
        hidden=torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.bfloat16),
        weight=weight,
        bias=torch.tensor([0.0, 2**-9, -1.0, -1.0], dtype=torch.bfloat16),
    )
    assert rule("fused_fp32_epilogue", inputs) == f"[{faults.NOT_ROUNDED}: computed in float32]"


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


def _numbered(impl, inputs) -> str:
    """The rule for ``impl``'s token on ``inputs``' row 0, as the end-to-end check names a token that went wrong."""
    want = diagnose.answer(inputs)
    return diagnose.explain(want, 0, impl(want))[0]


def test_a_winner_without_its_ranks_offset_is_named_for_the_offset():
    inputs = row_of_logits([0.0, 1.0, 2.0, 5.0, 3.0, 4.0])  # the maximum, id 3, is row 0 of rank 1 (ids 3 to 5)
    assert _numbered(lambda want: 0, inputs) == (
        "global id without its rank's offset: draft id 3 is row 0 of rank 1, whose ids start at 3, and came back "
        "as id 0"
    )


def test_a_target_mapped_through_d2t_again_is_named_d2t_twice():
    inputs = replace(row_of_logits([0.0, 9.0, 2.0, 1.0]), d2t=torch.tensor([1, 1, 1, 0]), target_vocab=5)
    # draft id 1 (the maximum) maps to target 2, and 2 again to 3: neither is a wrong number for id 1's row
    assert _numbered(lambda want: 3, inputs) == (
        "d2t applied twice: draft id 1 maps to target 2, which was mapped again, to 3"
    )


def test_an_id_carried_in_a_narrow_float_names_every_type_it_fits_and_no_other():
    """Compared as numbers: 2052 read in bfloat16 is 2048, so a comparison in the narrow type named float16's
    rounding of 2051 (2052) "bfloat16"."""
    carried = diagnose.carried_rule
    assert carried(2053, 2052) == "global id off by one, or id carried in float16: 2053 reported as 2052 fits both"
    assert carried(6154, 6152) == "id carried in float16: 6154 rounds to 6152"  # bfloat16 gives 6144
    assert carried(2299, 2304) == "id carried in bfloat16: 2299 rounds to 2304"  # float16 gives 2300
    assert carried(4098, 4096) == "id carried in bfloat16 or float16: 4098 rounds to 4096"
    assert carried(2070, 2064) == "id carried in bfloat16: 2070 rounds to 2064"  # float16 holds 2070
