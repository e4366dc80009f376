"""Sampling on vocab-sharded logits against the classic sampler: tokens, kept sets, log-probs, invariance,
and the distribution itself.

Every case the argmax properties draw, with a :class:`~properties.cases.plans.SamplePlan` per example: greedy,
tiny, unit and large temperatures mixed in one batch; top-k from 1 to the vocabulary with ties at the k-th value;
top-p with the mass planted at p; candidates C below, at and above k.
"""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from properties.cases.case import Case
from properties.cases.plans import SamplePlan, sample_plans
from properties.harness.runner import backend_tps, prepare
from properties.sampling.checks import (
    check_sample_invariance,
    masks_of,
    plan_for,
    token_noise,
)
from properties.sampling.distribution import DISTRIBUTION_CASES, DistributionCase, check_distribution
from properties.sampling.exactness import check_kept_set, check_sample_exact
from properties.sampling.log_probs import check_log_probs
from properties.sampling.own_randomness import check_batch_independence, check_equal_paths
from properties.sampling.support import check_named_divergence, check_support
from properties.strategies import cases, with_edge_cases

EDGE_PLAN = SamplePlan(temperature="mixed", top_k="at_tie", top_p="at_mass", candidates=4)
# Sampling's own edges, pinned so every run meets each (a fault that shows on one edge alone is found in any run):
# p exactly a share of equal masses, p cutting a tie group, p an ulp beside a share and at its extremes,
# temperatures at engines' greedy thresholds, subnormal and flattening, top-k at the vocabulary's edges, and the
# specials on a minority of rows.
SAMPLING_EDGES = (
    (
        Case(batch=16, hidden=6, vocab=300, tp=4, weights="normal", seed=21, spread=True),
        SamplePlan("one", "off", "exact", 8, 1),
    ),
    (
        Case(batch=16, hidden=6, vocab=200, tp=2, ties=("within_shard", "across_ranks"), seed=22, spread=True),
        SamplePlan("one", "small", "in_tie", 4, 2),
    ),
    (
        Case(batch=12, hidden=6, vocab=100, tp=2, ties=("within_shard",), seed=23, spread=True),
        SamplePlan("threshold", "edge", "beside", 2, 3),
    ),
    (
        Case(
            batch=12,
            hidden=6,
            vocab=500,
            tp=4,
            dtype="bfloat16",
            weights="normal",
            d2t="eagle3",
            target_extra=100,
            seed=24,
            spread=True,
        ),
        SamplePlan("every", "every", "every", 16, 4),
    ),
    (
        Case(
            batch=16,
            hidden=6,
            vocab=300,
            tp=4,
            bias=True,
            specials=("nan_ranks", "pos_inf", "neg_inf_rows"),
            seed=25,
            spread=True,
        ),
        SamplePlan("every", "at_tie", "extreme", 64, 5),
    ),
    # greedy rows beside sampled ones where an added id ties a base id of a later rank, p exactly a share of tied
    # masses, and mixed temperatures under mixed top-p (a nucleus taken at the wrong temperature): each a rare
    # meeting in a sampler property's few drawn examples
    (
        Case(batch=16, hidden=6, vocab=300, tp=4, added=16, ties=("added_tie",), seed=26, spread=True),
        SamplePlan("mixed", "off", "off", 4, 6),
    ),
    (
        Case(batch=16, hidden=6, vocab=240, tp=4, ties=("within_shard",), seed=30, spread=True),
        SamplePlan("one", "off", "exact", 1, 30),
    ),
    (
        Case(batch=16, hidden=6, vocab=300, tp=2, weights="normal", seed=40, spread=True),
        SamplePlan("mixed", "off", "mixed", 8, 40),
    ),
)


def with_sampling_edges(test):
    """Apply ``@example(case=..., plan=...)`` for every pinned sampling edge."""
    for case, plan in reversed(SAMPLING_EDGES):
        test = example(case=case, plan=plan)(test)
    return test


@with_sampling_edges
@with_edge_cases(plan=EDGE_PLAN)
@given(case=cases(spread=True), plan=sample_plans())
def test_sample_exact(sampling_impl, backend, case, plan):
    """Token for token; a sampler whose noise no token noise declares (``fn.noise_key``) is a named divergence:
    greedy rows exactly, sampled rows within the support, the divergence counted as an event."""
    check = check_sample_exact if token_noise(sampling_impl) else check_named_divergence
    check(sampling_impl, prepare(case, backend), plan_for(sampling_impl, plan))


@with_sampling_edges
@given(case=cases(spread=True), plan=sample_plans())
def test_sample_support(sampling_impl, backend, case, plan):
    """Every token is one the classic sampler can draw, whatever the noise: for samplers with their own randomness."""
    check_support(sampling_impl, prepare(case, backend), plan_for(sampling_impl, plan))


@with_sampling_edges
@given(case=cases(spread=True), plan=sample_plans())
def test_kept_set(sampling_impl, backend, case, plan):
    check_kept_set(sampling_impl, prepare(case, backend), plan_for(sampling_impl, plan))


@with_sampling_edges
@given(case=cases(spread=True), plan=sample_plans())
def test_sample_log_probs(sampling_impl, backend, case, plan):
    check_log_probs(sampling_impl, prepare(case, backend), plan_for(sampling_impl, plan))


@given(case=cases(int_weights=True, spread=True), plan=sample_plans(), data=st.data())
def test_sample_invariance(sampling_impl, backend, case, plan, data):
    inputs = prepare(case, backend)
    others = [tp for tp in backend_tps(backend) if tp != inputs.tp]
    tps = [data.draw(st.sampled_from(others), label="other tp")] if others else []
    check_sample_invariance(sampling_impl, inputs, plan_for(sampling_impl, plan), tps)


def _takes(impl, dist: DistributionCase) -> None:
    """Skip a head whose masks the sampler does not take (``fn.masks``)."""
    takes = masks_of(impl)
    rows = [(dist.top_k, dist.top_p), *((k, p) for _, _, k, p in dist.mates)]
    for mask, on in (("top_k", any(k > 0 for k, _ in rows)), ("top_p", any(p < 1 for _, p in rows))):
        if on and mask not in takes:
            pytest.skip(f"{impl} samples without {mask.replace('_', '-')}")


HEADS = pytest.mark.parametrize("dist", DISTRIBUTION_CASES, ids=[c.name for c in DISTRIBUTION_CASES])
MATED = [c for c in DISTRIBUTION_CASES if c.mates]


@HEADS
def test_sampled_distribution(sampling_impl, dist):
    """A chi-square test of many pinned seeds against softmax(logits / T) over the kept set (false alarm < 1e-9)."""
    _takes(sampling_impl, dist)
    check_distribution(sampling_impl, dist)


@pytest.mark.parametrize("dist", MATED, ids=[c.name for c in MATED])
def test_batch_independence(sampling_impl, dist):
    """A row alone and beside batchmates (one needs the fallback): the same tokens, or the same distribution."""
    _takes(sampling_impl, dist)
    check_batch_independence(sampling_impl, dist)


@HEADS
def test_equal_paths(sampling_impl, dist):
    """The sampler against its own classic path (``fn.classic_path``) on the same inputs and seeds."""
    _takes(sampling_impl, dist)
    check_equal_paths(sampling_impl, dist)
