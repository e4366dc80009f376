"""The classic sampler's pieces, the candidate path's fallbacks, the top-p slack and the chi-square, one by one."""

from __future__ import annotations

import math

import pytest
import torch

from groups.simulated import run_simulated
from properties.sampling.checks import top_p_slack
from properties.sampling.chi_square import chi_square, upper_gamma_log
from reference.oracle import tokens_from_draft_logits
from reference.sampling import SamplingParams, classic_sample, gumbel_noise, top_k_mask, top_p_mask, uniforms
from sharded.layout import vocab_parallel_layout
from sharded.local_sampling import FALLBACKS, candidates, gumbel_pairs


def params(batch: int, t=1.0, k=0, p=1.0, seed=0, c=64) -> SamplingParams:
    return SamplingParams(
        torch.full((batch,), float(t)),
        torch.full((batch,), k, dtype=torch.int64),
        torch.full((batch,), float(p)),
        torch.arange(batch, dtype=torch.int64) + seed,
        c,
    )


def test_noise_is_a_function_of_seed_and_id_alone():
    seeds = torch.tensor([0, 1, -5, 2**62])
    ids = torch.arange(1000)
    whole = gumbel_noise(seeds, ids)
    assert torch.equal(whole[:, 300:700], gumbel_noise(seeds, ids[300:700]))  # a shard draws the same noise
    assert torch.equal(whole[:, ids.flip(0)], gumbel_noise(seeds, ids.flip(0)))
    u = uniforms(seeds, ids)
    assert bool(((u > 0) & (u < 1)).all()) and len(set(u.flatten().tolist())) == u.numel()


def test_greedy_rows_are_the_argmax_and_ignore_noise_and_masks():
    logits = torch.tensor([[1.0, 3.0, 3.0, -1.0], [float("nan"), 0.0, float("nan"), 5.0]])
    p = SamplingParams(torch.zeros(2), torch.tensor([1, 1]), torch.tensor([0.1, 0.1]), torch.tensor([7, 8]))
    sample = classic_sample(logits, p)
    assert sample.tokens.tolist() == tokens_from_draft_logits(logits).tolist() == [1, 0]
    assert sample.kept.sum(dim=1).tolist() == [1, 1]


def test_top_k_keeps_every_tie_at_the_k_th_value_and_nan_first():
    x = torch.tensor([[1.0, 5.0, 3.0, 3.0, 3.0, -0.0, 0.0], [float("nan"), 1.0, 2.0, 0.0, 0.0, 0.0, 0.0]])
    kept = top_k_mask(x, torch.tensor([2, 1]))
    assert kept[0].nonzero().flatten().tolist() == [1, 2, 3, 4]
    assert kept[1].nonzero().flatten().tolist() == [0]
    assert top_k_mask(x, torch.tensor([0, 7])).all()  # 0 and k >= V are off


def test_top_p_keeps_tied_tokens_together_and_the_largest_always():
    x = torch.tensor([[0.0, 0.0, -1.0, -1.0, -2.0]])
    everything = torch.ones_like(x, dtype=torch.bool)
    assert top_p_mask(x, everything, torch.tensor([1e-6]))[0].tolist() == [True, True, False, False, False]
    e = torch.exp(torch.tensor([0.0, 0.0, -1.0, -1.0, -2.0], dtype=torch.float64))
    p = float((2 / e.sum()).float()) * (1 + 2**-20)  # just above the two largest: the -1 tie group joins
    assert top_p_mask(x, everything, torch.tensor([p]))[0].tolist() == [True, True, True, True, False]
    assert top_p_mask(x, everything, torch.tensor([1.0])).all()


def test_d2t_keys_the_noise_by_target_id():
    logits = torch.tensor([[0.5, 0.5, 0.5]])
    d2t = torch.tensor([0, 3, 5])  # targets 0, 4, 7
    sample = classic_sample(logits, params(1), d2t, 9)
    score = 0.5 + gumbel_noise(torch.tensor([0]), torch.tensor([0, 4, 7]))[0]
    assert int(sample.tokens[0]) == [0, 4, 7][int(score.argmax())]
    assert sample.kept[0].nonzero().flatten().tolist() == [0, 4, 7]  # unmapped targets are no tokens


@pytest.mark.parametrize(
    "change, word",
    [
        ({"temperature": torch.tensor([-1.0])}, "temperature"),
        ({"temperature": torch.tensor([math.inf])}, "temperature"),
        ({"top_k": torch.tensor([-1])}, "top_k"),
        ({"top_p": torch.tensor([0.0])}, "top_p"),
        ({"top_p": torch.tensor([1.5])}, "top_p"),
        ({"seed": torch.tensor([1.0])}, "seed"),
        ({"candidates": 0}, "candidates"),
        ({"temperature": torch.ones(2)}, "temperature"),
    ],
)
def test_bad_sampling_parameters_are_a_value_error_naming_them(change, word):
    good = params(1).__dict__
    with pytest.raises(ValueError, match=word):
        classic_sample(torch.zeros(1, 4), SamplingParams(**{**good, **change}))


def _run(impl, logits: torch.Tensor, tp: int, p: SamplingParams):
    """Run ``impl`` on a head whose logits are ``logits`` (identity hidden states), split over ``tp`` ranks."""
    batch, vocab = logits.shape
    layouts = vocab_parallel_layout(vocab, tp, padding_size=1)
    hidden = torch.eye(batch + 2)[:batch]
    weight = torch.cat([logits.T, torch.zeros(vocab, 2)], dim=1)

    def rank(group):
        lay = layouts[group.rank]
        return impl(hidden, weight[lay.token_ids()].clone(), None, lay, sampling=p, group=group)

    results, _ = run_simulated(rank, tp, 30)
    return results[0]


@pytest.mark.parametrize("reason", range(len(FALLBACKS)))
def test_each_candidate_fallback_is_reached_and_exact(reason):
    """A row for each reason the candidates may miss a kept token; the answer is the classic sampler's anyway."""
    g = torch.Generator().manual_seed(reason)
    logits = torch.randn(1, 40, generator=g)
    p = [
        params(1, k=10, c=4),  # k > C
        params(1, k=3, c=4),  # a rank's C-th candidate ties the k-th value (planted below)
        params(1, p=0.999, c=2),  # top-p without top-k, mass beyond the candidates
        params(1, c=4),  # no mask
        params(1, p=0.5, c=4),  # a NaN without top-k
    ][reason]
    if reason == 1:
        logits[0, :20] = -5.0
        logits[0, [0, 1, 2, 3, 4, 20, 21]] = torch.tensor([9.0, 8.0, 7.0, 7.0, 7.0, 7.0, 7.0])
    if reason == 4:
        logits[0, 7] = math.nan
    tokens, _, _, notes = _run(candidates, logits, 2, p)
    assert notes == (FALLBACKS[reason],)
    assert tokens.tolist() == classic_sample(logits, p).tokens.tolist()


def test_candidates_and_pairs_are_exact_without_a_fallback():
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(6, 48, generator=g) * 3
    for p in (params(6, k=5, c=8), params(6, p=0.3, c=16), params(6, k=8, p=0.9, t=0.5, c=8)):
        tokens, log_probs, kept, notes = _run(candidates, logits, 4, p)
        want = classic_sample(logits, p)
        assert notes == ("",) * 6 and tokens.tolist() == want.tokens.tolist()
        assert [sorted(set(r.tolist()) - {-1}) for r in kept] == [r.nonzero().flatten().tolist() for r in want.kept]
        assert torch.allclose(log_probs.double(), want.log_probs, rtol=0, atol=1e-5)
    tokens, _, kept, _ = _run(gumbel_pairs, logits, 4, params(6, t=0.7))
    assert tokens.tolist() == classic_sample(logits, params(6, t=0.7)).tokens.tolist() and kept is None


def test_the_top_p_slack_holds_for_any_order_and_is_within_a_factor_16_of_what_rounding_reaches():
    """One large mass and many just above half an ulp of it: summed large-first, every addition rounds away; summed
    small-first, none does.  The two sums differ by about ``(n-1) u / 2`` of the total, against a slack of
    ``(4n + 16) u``."""
    n = 4097
    masses = torch.cat([torch.ones(1, dtype=torch.float64), torch.full((n - 1,), 2.0**-53 * 1.5, dtype=torch.float64)])
    large_first = 0.0
    for m in masses.tolist():
        large_first += m
    small_first = 0.0
    for m in masses.flip(0).tolist():
        small_first += m
    gap = abs(small_first - large_first) / small_first
    assert top_p_slack(n) / 16 <= gap <= top_p_slack(n)
    for total in (float(masses.sum()), float(masses.sort().values.cumsum(0)[-1])):
        assert abs(total - small_first) / small_first <= top_p_slack(n)


def test_chi_square_matches_known_quantiles():
    assert math.exp(upper_gamma_log(1.0, 5.991464547107979 / 2)) == pytest.approx(0.05, rel=1e-9, abs=0)  # df 2
    assert math.exp(upper_gamma_log(5.0, 23.209251158954356 / 2)) == pytest.approx(0.01, rel=1e-9, abs=0)  # df 10
    for a, x in ((10, 70.0), (4, 3.0), (30, 2.0)):  # integer a: Q(a, x) = exp(-x) sum_{k<a} x^k / k!, both branches
        exact = math.exp(-x) * sum(x**k / math.factorial(k) for k in range(a))
        assert math.exp(upper_gamma_log(float(a), x)) == pytest.approx(exact, rel=1e-9, abs=0)
    assert math.exp(upper_gamma_log(0.5, 3.841458820694124 / 2)) == pytest.approx(0.05, rel=1e-9, abs=0)  # df 1
    stat, df, log_p = chi_square([10, 10, 80], [10.0, 10.0, 80.0])
    assert (stat, df, log_p) == (0.0, 2, 0.0)
    _, df, _ = chi_square([1, 2, 3, 100], [1.0, 2.0, 3.0, 100.0])  # three rare tokens pooled into one bin
    assert df == 1
