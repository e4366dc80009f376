"""The suite proves its power: every property fails on a deliberately broken implementation, for the rule it breaks.

Each property runs in-process exactly as the suite runs it (the same test
function, strategies, pinned edge cases and ``ci`` profile) against an
implementation from tests/broken.py or tests/broken_top_k.py, on the simulated group, and must fail with
the words of the rule.  Shrinking is left out: finding is the claim here, and
tests/test_plugin.py shows a shrunk failure through the real suite.
"""

from __future__ import annotations

import inspect
import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import reference.oracle
import tests.broken
import tests.broken_layouts
import tests.broken_top_k
from properties import test_d2t as d2t
from properties import test_divergence as divergence
from properties import test_equivalence as eq
from properties import test_head_layouts as layouts
from properties import test_input_errors as errors
from properties import test_layouts as lay
from properties import test_top_k as top_k
from properties import test_traffic as traffic
from properties.argmax import diagnosis as diagnose
from properties.argmax import faults
from properties.argmax import layouts as rules
from properties.harness.profiles import running_with
from properties.test_torch_semantics import check_argmax
from reference.head import NOT_A_ROW, row_ids
from sharded.impls import Impl, load_impl
from tests.suite import FIND_ONLY, failure

# (property, broken implementation in tests/broken.py or tests/broken_top_k.py, words its failure must contain)
CATCHES = [
    (eq.test_token_exact, "base_padding_unmasked", "[base padding returned: "),
    (eq.test_token_exact, "added_padding_unmasked", "[added padding returned: "),
    (eq.test_token_exact, "logits_vocab_ignored", "[id beyond the logits vocabulary returned: "),
    (eq.test_token_exact, "added_ids_by_position", "[added id mapped to the wrong global id: "),
    (eq.test_token_exact, "lowest_rank_wins", "[tie across ranks resolved by rank, not by id"),
    (eq.test_token_exact, "nan_ignored", "[NaN not treated as the maximum"),
    (eq.test_token_exact, "subnormals_flushed", "[subnormal logits flushed to zero before the reduction]"),
    (eq.test_token_exact, "logits_in_float64", "[logits not rounded to the head's dtype before the reduction: "),
    (eq.test_token_exact, "tf32_matmul", "[float32 logits from a TF32 matmul: rule 1"),
    (eq.test_token_exact, "last_index_in_shard", "[tie within a shard resolved to a later index"),
    (eq.test_token_exact, "highest_rank_wins", "[tie across ranks resolved to the higher rank]"),
    (eq.test_token_exact, "ids_in_bf16", "id carried in bfloat16"),
    (eq.test_token_exact, "values_in_bf16", f"[{faults.VALUES_NARROWED}: rounded to bfloat16"),
    (eq.test_token_exact, "off_by_one_at_shard_start", "global id off by one"),
    (eq.test_token_exact, "softcap_after_choosing", "[soft cap not applied before choosing"),
    # issue 50: the bias, a stage the generic "chose a non-maximal logit" used to hide
    (eq.test_token_exact, "bias_skipped_on_added", f"[{faults.BIAS_SKIPPED}: left off the added ids]"),
    (eq.test_token_exact, "bias_skipped", f"[{faults.BIAS_SKIPPED}: left off every id]"),
    (eq.test_token_exact, "key_without_zero_canon", "[signed zero:"),
    (eq.test_token_exact, "key_without_nan_canon", "[NaN not treated as the maximum"),
    (eq.test_token_exact, "d2t_skipped", "[d2t mapping skipped"),
    (eq.test_token_exact, "ids_without_rank_offset", "[global id without its rank's offset: draft id "),
    (eq.test_token_exact, "d2t_applied_twice", "[d2t applied twice: draft id "),
    (eq.test_token_exact, "last_rank_skips_the_exchange", "rank(s) [0] waited in all_gather"),
    (eq.test_token_exact, "rank_one_raises", "raised on valid input: RuntimeError: rank 1 lost its shard"),
    (errors.test_rejects_bad_input, "scale_sign_ignored", "bad input accepted"),
    (eq.test_output_contract, "base_padding_unmasked", "[base padding returned: "),
    (eq.test_output_contract, "logits_vocab_ignored", "[id beyond the logits vocabulary returned: "),
    (eq.test_tp_invariance, "highest_rank_wins", "TP invariance: tokens differ between"),
    (eq.test_row_independence, "batched_path_differs", "row independence: a row's token changed"),
    (eq.test_determinism, "alternating_tie_break", "nondeterminism: two runs on identical input differ"),
    (divergence.test_all_neg_inf_row_with_offset_d2t, "highest_rank_wins", "the local path returns d2t[0]"),
    (errors.test_ids_beyond_float32_are_exact_or_rejected, "ids_in_bf16", "came back as 16777216"),
    (d2t.test_the_flag_fires_exactly_on_non_monotone_tables, "d2t_skipped", "table, tie at"),
    (eq.test_token_exact, "d2t_for_base_ids_only", "[d2t mapping skipped: returned draft id"),
    (d2t.test_the_top_k_flag_fires_exactly_on_non_monotone_tables, "topk_ties_by_target_id", "the flag cannot fire"),
    # the thin meetings of the first coverage report (docs/checks.md: Coverage of feature pairs)
    (eq.test_token_exact, "inf_ties_by_rank", "[tie across ranks resolved by rank, not by id"),
    (eq.test_token_exact, "added_padding_nan_leaks", "which no draft id maps to through d2t]"),
    (top_k.test_top_k_exact, "topk_merge_by_rank", "[top-k tie order: equal logits must come in ascending id]"),
    (top_k.test_top_k_exact, "topk_padding_fills_short_rank", "[base padding returned: "),
    (top_k.test_top_k_exact, "topk_scale_applied_twice", "[top-k values not bit-exact: "),
    (top_k.test_top_k_contract, "topk_padding_fills_short_rank", "[base padding returned: "),
    (top_k.test_top_k_contract, "topk_ids_int32", "[top-k output contract: rank 0 returned torch.int32"),
    (top_k.test_top1_is_the_argmax_token, "topk_merge_by_rank", "[top-1 differs from the argmax implementation"),
    (top_k.test_top_k_determinism, "topk_alternating", "[top-k nondeterminism: two runs on identical input differ]"),
    (top_k.test_top_k_rejects_k_above_the_logits_vocabulary, "topk_k_clamped", "k=7 above the logits vocabulary"),
    (
        top_k.test_top_k_exact,
        "topk_log_probs_unscaled_partition",
        "[top-k log-probabilities differ from the classic log-softmax by more than 1e-05 and 4 float32 ulps ",
    ),
    # issue 62: the layouts beyond one even split, each bug a real one of spec section 13's classes
    (lay.test_ranks_agree, "own_copy_argmax", f"[{rules.OWN_COPY}]"),
    (lay.test_exact_under_divergence, "own_copy_argmax", f"[{rules.ONE_RANKS_INPUTS}]"),
    (lay.test_exact_under_divergence, "rank0_inputs_broadcast", f"[{rules.ONE_RANKS_INPUTS}]"),
    (lay.test_attention_dp_rows, "segment_trimmed", f"[{rules.SEGMENT_TRIMMED}]"),
    (lay.test_attention_dp_rows, "first_rows_kept", f"[{rules.OTHER_SEGMENT}]"),
    (lay.test_attention_dp_rows, "rows_mixed_with_ranks", f"[{rules.ROWS_MIXED}]"),
    (lay.test_uneven_shards, "offset_from_own_width", f"[{diagnose.OFFSET_FROM_WIDTH}: "),
    (lay.test_uneven_shards, "widest_width_assumed", f"[{diagnose.EVEN_WIDTHS_ASSUMED}: "),
    (lay.test_uneven_shards, "indices_summed", f"[{rules.INDICES_SUMMED}]"),
    (eq.test_token_exact, "indices_summed", f"[{rules.INDICES_SUMMED}]"),
]
TOP1_OFF = "[top-1 differs from the argmax implementation tests.broken:NAME, whose token is not the classic path's]"
# Bugs caught under another rule's name before (issue 27), each with the exact rule (numbers aside) of every argmax
# property that fails on it under the ci profile; the properties not listed pass on it (measured by running them all).
EVERYWHERE = {
    "key_without_zero_canon": {
        eq.test_token_exact: f"[{faults.SIGNED_ZERO}]",
        top_k.test_top1_is_the_argmax_token: TOP1_OFF,
    },
    "cap_base_rows_only": {
        eq.test_token_exact: f"[{faults.ADDED_UNCAPPED}: the soft cap and the scale left off]",
        top_k.test_top1_is_the_argmax_token: TOP1_OFF,
    },
    "nan_lost_in_blocks": {
        eq.test_token_exact: f"[{diagnose.NAN_NOT_MAX}]",
        eq.test_tp_invariance: f"[TP invariance: tokens differ between tp=N and tp=N; {diagnose.NAN_NOT_MAX}]",
        top_k.test_top1_is_the_argmax_token: TOP1_OFF,
    },
    "rows_shifted_by_padding": {
        eq.test_token_exact: f"[{diagnose.ANOTHER_ROW}: row N holds the token of an all-zero hidden state, a row the "
        "batch was padded with]",
        eq.test_row_independence: "[row independence: a row's token changed when the rest of the batch changed]",
        divergence.test_all_neg_inf_row_with_offset_d2t: "tests.broken:rows_shifted_by_padding: all -inf rows gave "
        "[N, N, N]; the local path returns d2t[N] = N, the oracle N",
        top_k.test_top1_is_the_argmax_token: TOP1_OFF,
    },
    "fused_fp32_epilogue": {
        eq.test_token_exact: f"[{faults.NOT_ROUNDED}: computed in float32]",
        top_k.test_top1_is_the_argmax_token: TOP1_OFF,
    },
}
# they hang, kill a process or refuse to start: tests/test_pool.py; a torchrun node's launcher: tests/test_torchrun.py
PROCESS_ONLY = {"rank_one_sleeps", "rank_one_dies", "start_refused", "node_one_goes_down"}
TRAFFIC_ONLY = {"topk_two_gathers"}  # right answers, wrong traffic: test_traffic_property_fails_on_...


@pytest.mark.parametrize("prop, name, words", CATCHES, ids=[f"{prop.__name__}-{name}" for prop, name, _ in CATCHES])
def test_property_fails_on_a_broken_implementation(prop, name, words):
    message = failure(prop, name)
    assert message, f"{prop.__name__} passed on tests.broken:{name}: the suite lost its power"
    assert words in message, f"{prop.__name__} caught tests.broken:{name}, but not for {words!r}:\n{message}"


def shape(text: str) -> str:
    """A rule with its numbers left out: they come from the case Hypothesis found first."""
    return re.sub(r"\d+", "N", text)


@pytest.mark.parametrize(
    "name, prop",
    [(name, prop) for name, rules in EVERYWHERE.items() for prop in rules],
    ids=[f"{name}-{prop.__name__}" for name, rules in EVERYWHERE.items() for prop in rules],
)
def test_every_property_that_catches_a_bug_names_its_rule(name, prop):
    message = failure(prop, name)
    assert message, f"{prop.__name__} passed on tests.broken:{name}: the suite lost its power"
    assert shape(message.splitlines()[0]) == shape(EVERYWHERE[name][prop].replace("NAME", name)), message


def test_every_broken_implementation_is_caught():
    broken = {
        name
        for module in (tests.broken, tests.broken_top_k, tests.broken_layouts)
        for name, fn in vars(module).items()
        if inspect.isfunction(fn) and fn.__module__ == module.__name__ and not name.startswith("_")
    }
    assert broken - PROCESS_ONLY - TRAFFIC_ONLY == {name for _, name, _ in CATCHES} | set(EVERYWHERE)


@pytest.mark.parametrize(
    "prop, name, spec",
    [
        # README's float64 example is correct, but it gathers 8-byte pairs where vllm_pairs' formula says 4
        (traffic.test_bytes_per_step, "vllm_pairs", "examples.float64_pairs:local_argmax"),
        # right answers, but values and ids in two all-gathers
        (traffic.test_top_k_bytes_per_step, "topk_pairs", "tests.broken_top_k:topk_two_gathers"),
    ],
)
def test_traffic_property_fails_on_a_path_that_moves_other_bytes(monkeypatch, prop, name, spec):
    monkeypatch.setattr(traffic, "load_impl", lambda _: load_impl(spec))
    with (
        running_with(prop, FIND_ONLY),
        pytest.raises(AssertionError, match=rf"{name} on sim rank 0 moved \{{'all_gather': \d+\}}, expected"),
    ):
        prop(name=name, backend="sim")


def test_oracle_layout_property_fails_on_an_oracle_that_concatenates_shards(monkeypatch):
    """The classic path of an engine that truncates the rank-order concatenation: wrong once added ids exist."""

    def concatenated(org, added, padding_size, tp, logits_vocab):
        ids = row_ids(org, added, padding_size, tp).flatten()
        return (ids != NOT_A_ROW).nonzero().flatten()[:logits_vocab]

    monkeypatch.setattr(reference.oracle, "token_columns", concatenated)
    message = failure(layouts.test_oracle_logits_are_the_full_head_by_global_id, "vllm_pairs")
    assert "the oracle misplaced a row of Case(" in message, message


def test_log_probabilities_within_tolerance_pass():
    """The log-probability comparison is not stricter than a partition combined across ranks can meet."""

    def combined(**kwargs):
        return tests.broken_top_k._top_k_log_probs(**kwargs, scaled=True)

    combined.values = "log_probs"
    with running_with(top_k.test_top_k_exact, settings(FIND_ONLY, max_examples=30)):
        top_k.test_top_k_exact(topk_impl=Impl("combined", combined), backend="sim")


def last_index_argmax(t):
    return int(t.shape[0] - 1 - torch.argmax(t.flip(0)))


def test_torch_semantics_property_fails_on_a_last_index_argmax():
    @FIND_ONLY
    @given(
        row=st.lists(st.sampled_from([0.0, -0.0, 1.0, float("nan")]), min_size=1, max_size=8),
        dtype=st.sampled_from(["float32", "bfloat16"]),
    )
    def semantics(row, dtype):
        check_argmax(last_index_argmax, row, dtype)

    with pytest.raises(AssertionError, match="the first maximum is"):
        semantics()
