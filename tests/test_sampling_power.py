"""Every sampling property fails on a deliberately broken sampler (tests/broken_sampling.py), for the rule it breaks.

As in tests/test_power.py: the suite's own test functions, strategies and ``ci`` profile, on the simulated group,
without shrinking; the rule must be the first line of the failure, numbers aside.
"""

from __future__ import annotations

import inspect
import re

import pytest
from hypothesis import settings

from properties import test_sampling as ts
from properties.cases.case import Case
from properties.cases.plans import SamplePlan
from properties.harness.runner import prepare
from properties.sampling import faults, stages
from properties.sampling import own_randomness as own
from properties.sampling import support_rules as support
from properties.sampling.checks import SAMPLE_KEPT, observed, run_sampler, same_kept, same_token, subject_of
from properties.sampling.distribution import BY_NAME, DISTRIBUTION_CASES, DISTRIBUTION_WRONG
from properties.sampling.experiments import name_fault
from properties.sampling.row_evidence import ROW_TOOK_BATCHMATES
from sharded.impls import Impl, load_impl
from tests.suite import FIND_ONLY, broken_spec, failure

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
    # issue 39: the properties for samplers with their own randomness, and the candidate-position noise
    (ts.test_sample_exact, "noise_by_candidate_position", f"[{faults.NOISE_BY_POSITION}]"),
]


def _on_head(test, head: str):
    def run(sampling_impl):
        test(sampling_impl, BY_NAME[head])

    run.__name__ = f"{test.__name__}[{head}]"
    return run


def _distribution(case: str):
    return _on_head(ts.test_sampled_distribution, case)


OWN_RANDOMNESS = [  # (property, broken sampler, the first line of its failure)
    (_on_head(ts.test_sampled_distribution, "tp2-neg-inf"), "top_k_one_past", f"[{support.TOP_K_DROPS}]"),
    (
        _on_head(ts.test_batch_independence, "tp2-fallback-all-neg-inf"),
        "top_k_of_the_batch",
        f"[{own.ROW_FOLLOWS_BATCH}: chi-square p below 1e-09]",
    ),
    (
        _on_head(ts.test_batch_independence, "tp2-fallback-all-neg-inf"),
        "top_k_of_the_batch_per_row",
        f"[{own.TOKEN_FOLLOWS_BATCH}]",
    ),
    (_on_head(ts.test_equal_paths, "tp2-neg-inf"), "top_k_one_past_beside_its_classic_path", f"[{own.PATHS_DIFFER}: "),
]


@pytest.mark.parametrize("prop, broken, rule", OWN_RANDOMNESS, ids=[f"{p.__name__}-{b}" for p, b, _ in OWN_RANDOMNESS])
def test_the_own_randomness_properties_name_the_rule_they_catch(prop, broken, rule):
    message = failure(prop, broken)
    assert message.startswith(rule), message[:800]


def test_declared_candidate_position_noise_is_a_named_divergence():
    """The same noise declared (``fn.noise_key``): exactness judges greedy rows and the support, and passes."""
    budget = settings(FIND_ONLY, max_examples=40)
    assert failure(ts.test_sample_exact, "declared_candidate_position", budget) == ""
    assert failure(ts.test_sample_invariance, "declared_candidate_position", budget) == ""


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


# A failing run that several models reproduce, and the rule the experiments leave: the first fitting model in
# MODELS order is another fault in the last three.  Case(batch=2, hidden=6, vocab=48, tp=2, within_shard ties).
SEPARATED = [
    ("greedy_below_1e_5", 53, SamplePlan("threshold", "off", "off", 4, 53), "exact", faults.TEMPERATURE_THRESHOLD),
    ("top_p_splits_ties", 1, SamplePlan("one", "off", "in_tie", 4, 1), "exact", faults.TOP_P_SPLITS_TIES),
    ("top_p_at_or_below", 11, SamplePlan("one", "off", "exact", 4, 11), "exact", faults.TOP_P_AT_OR_BELOW),
    ("kept_before_top_p", 0, SamplePlan("one", "off", "random", 4, 0), "kept", faults.REPORTED_BEFORE_TOP_P),
]


@pytest.mark.parametrize("broken, seed, plan, judged, rule", SEPARATED, ids=[b for b, *_ in SEPARATED])
def test_the_experiments_separate_the_models_that_fit_one_run(broken, seed, plan, judged, rule):
    inputs = prepare(Case(batch=2, hidden=6, vocab=48, tp=2, ties=("within_shard",), seed=seed, spread=True))
    impl = load_impl(broken_spec(broken))
    drawn, params = run_sampler(impl, inputs, plan, SAMPLE_KEPT)
    seen, subject = observed(inputs, params, drawn), subject_of(impl, inputs, SAMPLE_KEPT)
    agrees = {"exact": same_token, "kept": same_kept}[judged]
    fit = [r for r, _ in faults.candidates(inputs, params, subject, seen, [0, 1], agrees)]
    assert len(set(fit)) >= 2 and rule in fit, fit
    assert name_fault(inputs, params, subject, seen, [0, 1], agrees) == rule


def test_a_candidate_fault_is_named_only_for_a_sampler_that_declares_candidates():
    """The same sampler without ``fn.draws_from_candidates``: its missing fallback is no longer an explanation."""
    declared = load_impl(broken_spec("no_fallback_k_above_c"))
    assert failure(ts.test_kept_set, declared).startswith(f"[{faults.NO_FALLBACK_K_ABOVE_C}]")

    def undeclared(**kwargs):
        return declared.fn(**kwargs)

    undeclared.__signature__ = inspect.signature(declared.fn)
    message = failure(ts.test_kept_set, Impl("tests.test_sampling_power:undeclared", undeclared))
    assert message and not message.startswith(f"[{faults.NO_FALLBACK_K_ABOVE_C}]"), message[:300]


# issue 50: each stage of the pipeline broken on its own, named for that stage (or its fault) in every property that
# fails on it: exactness, the support, the kept set, the log-probabilities (None: that property passes on it)
STAGE_PROPERTIES = (ts.test_sample_exact, ts.test_sample_support, ts.test_kept_set, ts.test_sample_log_probs)
OWN_KEPT, LP = "processed log-probability over its own kept set: ", "processed log-probability: "
K, P = stages.KEPT_AFTER_TOP_K, stages.KEPT_AFTER_TOP_P
STAGED = {
    "x_in_float64": (faults.X_IN_FLOAT64, support.OVERFLOW_TIE, stages.KEPT_OVERFLOW, stages.LOG_PROB_OVERFLOW),
    "top_k_one_past": (K, K, K, OWN_KEPT + K),
    "top_p_raised": (P, P, P, OWN_KEPT + P),
    "first_temperature": (ROW_TOOK_BATCHMATES,) * 4,
    "raw_log_prob_at_draft_id": (
        None,
        None,
        None,
        stages.LOG_PROB_AT.format(kind="raw", where="the draft id (before d2t)"),
    ),
    "processed_is_raw": (None, None, None, stages.LOG_PROB_IS.format(kind="processed", what=stages.RAW)),
    # its own randomness (exactness is the support there): named by the model whose support holds every draw and
    # whose kept set and log-probabilities at the drawn token are the sampler's, in every experiment
    **{
        broken: (rule, rule, None if "unreported" in broken else rule, LP + rule)
        for broken, rule in (
            ("multinomial_top_p_skipped", faults.TOP_P_SKIPPED),
            ("multinomial_top_p_skipped_unreported", faults.TOP_P_SKIPPED),
            ("multinomial_top_k_skipped", faults.TOP_K_SKIPPED),
            ("multinomial_greedy_below_1e_2", faults.TEMPERATURE_THRESHOLD),
        )
    },
    # the support property names what token-exactness names, where the noise is declared
    **{
        broken: (None, rule, None, None)
        for broken, rule in (
            ("noise_before_masks", faults.NOISE_BEFORE_MASKS),
            ("greedy_rows_sampled", faults.GREEDY_SAMPLED),
            ("top_p_ignored", faults.TOP_P_SKIPPED),
            ("ties_by_rank", faults.TIE_BY_RANK),
            ("ties_to_largest_id", faults.TIE_UNORDERED),
            ("nan_never_wins", faults.NAN_NOT_MAX),
            ("x_in_head_dtype", faults.X_IN_HEAD_DTYPE),
            ("top_p_at_or_below", faults.TOP_P_AT_OR_BELOW),
            # below the threshold, only rows whose logit / T overflowed fail the support: the overflow's tie
            ("greedy_below_1e_5", support.OVERFLOW_TIE),
        )
    },
}
STAGE_CASES = [
    (prop, broken, rule)
    for broken, rules in STAGED.items()
    for prop, rule in zip(STAGE_PROPERTIES, rules, strict=True)
    if rule is not None
]


@pytest.mark.parametrize("prop, broken, rule", STAGE_CASES, ids=[f"{p.__name__}-{b}" for p, b, _ in STAGE_CASES])
def test_each_stage_is_named_in_every_property_that_fails_on_it(prop, broken, rule):
    message = failure(prop, broken)
    assert message.startswith(f"[{rule}"), message[:800]


def test_a_model_whose_support_holds_every_draw_but_whose_odds_do_not_is_not_named():
    """Top-p's nucleus taken at T = 1, drawn at T: below T = 1 it keeps tokens the nucleus of x drops, all within
    top-k's set, so "top-p not applied" holds every draw; drawn 400 times where that model parts most from the
    classic one, the odds refute it, and the token is named by what drops it."""
    message = failure(ts.test_sample_exact, "multinomial_top_p_at_t1_unreported")
    assert message.startswith(f"[{support.TOP_P_DROPS}]"), message[:800]
    # its log-probabilities equal no value a stage names (softmax over a nucleus it does not report): the stage rule
    message = failure(ts.test_sample_log_probs, "multinomial_top_p_at_t1_unreported")
    assert message.startswith("[processed log-probability more than 8 float32 ulps"), message[:800]


def test_a_distribution_failure_names_the_parameters_its_draws_fit():
    """Every sampled row at temperature 1, judged at T = 2: the few ids that made the chi-square, and T = 1."""
    message = failure(_distribution("tp2-tie-at-k"), "temperature_one")
    assert message.startswith(f"[{DISTRIBUTION_WRONG}: chi-square p below 1e-09]"), message[:800]
    assert "its share of the kept mass" in message and "the draws fit T = 1 (p = " in message, message[:800]


OWN_RANDOMNESS_PROPERTIES = [
    *STAGE_PROPERTIES,
    ts.test_sample_invariance,
    *(_on_head(test, dist.name) for dist in DISTRIBUTION_CASES for test in (ts.test_sampled_distribution,
                                                                            ts.test_batch_independence)),
]  # fmt: skip


@pytest.mark.parametrize("prop", OWN_RANDOMNESS_PROPERTIES, ids=lambda p: p.__name__)
def test_a_correct_sampler_with_its_own_randomness_passes(prop):
    """torch.multinomial over the classic kept set: no token noise declares it, and it breaks no rule (the pinned
    edge cases and 25 generated examples each: what the power tests ask of a passing subject)."""
    assert failure(prop, "multinomial_over_kept", settings(FIND_ONLY, max_examples=25)) == ""
