"""The pinned heads of the distribution properties hold what their names say, the support holds every classic
draw, and the two-sample test tells one distribution from another."""

from __future__ import annotations

import math
import random

import pytest
import torch

from properties.argmax.checks import run_valid
from properties.harness.runner import prepare
from properties.oracle import answer
from properties.sampling.checks import unpack
from properties.sampling.chi_square import homogeneity
from properties.sampling.distribution import BY_NAME, DistributionCase, draw_params, expected
from reference.sampling import classic_sample, kept_mask, scaled, support_mask, top_k_mask, top_p_margin
from sharded.impls import load_impl
from tests.test_sampling_edges import one_row


def judged_x(dist: DistributionCase) -> tuple[torch.Tensor, object]:
    _, params = draw_params(dist, range(1), False)
    inputs = prepare(dist.case)
    full, _ = answer(inputs.with_rows([dist.row])).target_logits
    return scaled(full, params), params


def test_the_tie_at_k_head_keeps_more_than_k():
    x, params = judged_x(BY_NAME["tp2-tie-at-k"])
    assert int(top_k_mask(x, params.top_k).sum()) > int(params.top_k[0])


def test_the_tied_maxima_head_keeps_several_tokens_under_top_k_1():
    x, params = judged_x(BY_NAME["tp4-top-1-tied-maxima"])
    assert int(params.top_k[0]) == 1 and int(top_k_mask(x, params.top_k).sum()) >= 2


def test_the_exact_top_p_head_puts_a_token_exactly_on_the_boundary():
    x, params = judged_x(BY_NAME["tp2-top-p-exact"])
    kept = top_k_mask(x, params.top_k)
    margin, _ = top_p_margin(x, kept, params.top_p)
    assert bool(((margin == 0) & kept).any())


@pytest.mark.parametrize("head, value", [("tp2-nan", math.nan), ("tp2-pos-inf", math.inf)])
def test_the_special_heads_draw_one_token_their_special_value(head, value):
    dist = BY_NAME[head]
    probs = expected(prepare(dist.case), dist)
    x, _ = judged_x(dist)
    (token,) = probs.nonzero().flatten().tolist()
    assert math.isnan(x[0, token]) if math.isnan(value) else float(x[0, token]) == value


def test_the_neg_inf_head_holds_minus_inf_beside_finite_logits():
    x, _ = judged_x(BY_NAME["tp2-neg-inf"])
    assert bool((x == -math.inf).any()) and int(torch.isfinite(x).sum()) > 1


@pytest.mark.parametrize("head", ["tp2-fallback-unmasked", "tp2-fallback-all-neg-inf"])
def test_a_fallback_head_has_a_mate_that_falls_back_and_a_judged_row_that_does_not(head):
    dist = BY_NAME[head]
    rows, params = draw_params(dist, range(1), True)
    inputs = prepare(dist.case).with_rows(rows)
    drawn = unpack(run_valid(load_impl("candidates"), inputs, "heads", lambda kw: {**kw, "sampling": params})[0])
    assert drawn.notes[0] == "" and any(drawn.notes[1:]), drawn.notes


def test_every_classic_draw_lies_in_the_support():
    """Random rows with NaN, +inf and -inf planted, every mask: the classic token (any seed) is in the support."""
    rng = random.Random(5)
    for _ in range(200):
        vocab = rng.randint(1, 12)
        row = [rng.choice([-2.0, 0.0, 1.0, 1.0, 3.0, math.inf, -math.inf, math.nan]) for _ in range(vocab)]
        t, k, p = rng.choice([0.5, 1.0, 1e30]), rng.randint(0, vocab), rng.choice([0.3, 0.9, 1.0])
        params = one_row(t, k, p, seed=rng.randint(0, 2**40))
        logits = torch.tensor([row])
        x = scaled(logits, params)
        token = int(classic_sample(logits, params).tokens[0])
        assert bool(support_mask(x, kept_mask(x, params))[0, token]), (row, t, k, p, token)


def test_homogeneity_passes_one_distribution_and_fails_two():
    g = torch.Generator().manual_seed(0)
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    a, b = (torch.multinomial(probs, 4000, True, generator=g).bincount(minlength=4).tolist() for _ in range(2))
    assert homogeneity(a, b)[2] > math.log(1e-3)
    c = torch.multinomial(torch.tensor([0.4, 0.4, 0.15, 0.05]), 4000, True, generator=g).bincount(minlength=4)
    assert homogeneity(a, c.tolist())[2] < math.log(1e-9)
