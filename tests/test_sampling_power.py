"""Every sampling property fails on a deliberately broken sampler (tests/broken_sampling.py), for the rule it breaks.

As in tests/test_power.py: the suite's own test functions, strategies and ``ci`` profile, on the simulated group,
without shrinking; the rule must be the first line of the failure, numbers aside.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import settings

from properties import sampling_faults as faults
from properties import test_sampling as ts
from properties.distribution import DISTRIBUTION_WRONG
from tests.suite import FIND_ONLY, failure

PROPERTIES = {"exact": ts.test_sample_exact, "kept": ts.test_kept_set, "log_probs": ts.test_sample_log_probs}
CATCHES = [  # (property, broken sampler, the first line of its failure, numbers aside)
    (ts.test_sample_exact, "noise_by_column", f"[{faults.NOISE_BY_COLUMN}]"),
    (
        ts.test_sample_invariance,
        "noise_by_column",
        f"[sampling TP invariance: tokens differ between tp=N and tp=N; {faults.NOISE_BY_COLUMN}]",
    ),
    (ts.test_sample_exact, "noise_by_draft_id", f"[{faults.NOISE_BY_DRAFT_ID}]"),
    (ts.test_sample_exact, "temperature_after_noise", f"[{faults.TEMPERATURE_AFTER_NOISE}]"),
    (ts.test_sample_exact, "noise_before_masks", f"[{faults.NOISE_BEFORE_MASKS}]"),
    (ts.test_kept_set, "noise_before_masks", f"[{faults.NOISE_BEFORE_MASKS}]"),
    (ts.test_sample_exact, "greedy_rows_sampled", f"[{faults.GREEDY_SAMPLED}]"),
    (ts.test_sample_exact, "top_k_drops_ties", f"[{faults.TOP_K_TIES_DROPPED}]"),
    (ts.test_kept_set, "top_k_drops_ties", f"[{faults.TOP_K_TIES_DROPPED}]"),
    (ts.test_sample_exact, "top_p_ignored", f"[{faults.TOP_P_SKIPPED}]"),
    (ts.test_sample_exact, "ties_by_rank", f"[{faults.TIE_BY_RANK}]"),
    (ts.test_sample_exact, "ties_to_largest_id", f"[{faults.TIE_UNORDERED}]"),
    (ts.test_sample_exact, "nan_never_wins", f"[{faults.NAN_NOT_MAX}]"),
    (ts.test_sample_exact, "top_p_over_candidates", f"[{faults.TOP_P_OVER_CANDIDATES}]"),
    (ts.test_kept_set, "top_p_over_candidates", f"[{faults.TOP_P_OVER_CANDIDATES}]"),
    (ts.test_sample_exact, "no_fallback_k_above_c", f"[{faults.NO_FALLBACK_K_ABOVE_C}]"),
    (ts.test_kept_set, "no_fallback_k_above_c", f"[{faults.NO_FALLBACK_K_ABOVE_C}]"),
    (ts.test_sample_log_probs, "log_prob_per_shard", f"[{faults.PER_SHARD['raw']}]"),
    # issue 38: the faults that passed or were named after another one, in every property that fails on them
    *[
        (prop, broken, f"[{rule}]" if prop is not ts.test_sample_log_probs else f"[processed log-probability: {rule}]")
        for broken, rule, props in (
            ("greedy_below_1e_5", faults.TEMPERATURE_THRESHOLD, ("exact", "kept", "log_probs")),
            ("greedy_below_1e_2", faults.TEMPERATURE_THRESHOLD, ("exact", "kept", "log_probs")),
            ("x_in_head_dtype", faults.X_IN_HEAD_DTYPE, ("exact", "kept", "log_probs")),
            ("top_p_at_or_below", faults.TOP_P_AT_OR_BELOW, ("kept", "log_probs")),
            ("top_p_splits_ties", faults.TOP_P_SPLITS_TIES, ("exact", "kept", "log_probs")),
            ("kept_before_top_p", faults.REPORTED_BEFORE_TOP_P, ("kept", "log_probs")),
            ("no_fallback_tied_at_c", faults.NO_FALLBACK_TIED_AT_C, ("exact", "kept", "log_probs")),
        )
        for prop in (PROPERTIES[name] for name in props)
    ],
]


def _distribution(case: str):
    def test(sampling_impl):
        ts.test_sampled_distribution(sampling_impl, [c.name for c in ts.DISTRIBUTION_CASES].index(case))

    return test


@pytest.mark.parametrize("prop, broken, rule", CATCHES, ids=[f"{p.__name__}-{b}" for p, b, _ in CATCHES])
def test_each_sampling_property_names_the_rule_it_catches(prop, broken, rule):
    message = failure(prop, broken)
    assert message, f"{prop.__name__} passed on tests.broken_sampling:{broken}"
    assert re.sub(r"\d+", "N", message.splitlines()[0]) == re.sub(r"\d+", "N", rule), message[:800]


@pytest.mark.parametrize("broken", ["noise_by_column", "noise_repeats_every_16_ids"])
def test_the_distribution_catches_noise_shared_between_tokens(broken):
    """Noise keyed by shard column repeats across ranks; noise that repeats every 16 ids is declared, so the oracle
    draws it too and only the distribution can see it."""
    message = failure(_distribution("tp2"), broken)
    assert message.startswith(f"[{DISTRIBUTION_WRONG}: chi-square p below 1e-09]"), message[:800]


def test_declared_noise_passes_token_exactness_so_only_the_distribution_judges_it():
    budget = settings(FIND_ONLY, max_examples=60)
    assert failure(ts.test_sample_exact, "noise_repeats_every_16_ids", budget) == ""
