"""The sampling edges: what the classic sampler does where float32 overflows or flattens, the plans that plant the
edges (exact shares, cut tie groups, engines' thresholds), and the spread cases' specials on a minority of rows."""

from __future__ import annotations

import math

import torch

from properties.cases.case import Case
from properties.cases.plans import TINY, SamplePlan
from properties.cases.tensors import SWITCH
from properties.harness.runner import prepare
from properties.oracle import answer
from properties.sampling.checks import oracle_sample
from properties.sampling.params import sampling_params
from properties.sampling.variants import Variant, _top_p, variant_sample
from reference.sampling import SamplingParams, classic_sample, gumbel_noise, masses, scaled, top_k_mask, top_p_margin

TIES = Case(batch=16, hidden=6, vocab=200, tp=2, ties=("within_shard", "across_ranks"), seed=22, spread=True)


def one_row(t: float, k: int = 0, p: float = 1.0, seed: int = 3) -> SamplingParams:
    return SamplingParams(torch.tensor([t]), torch.tensor([k]), torch.tensor([p]), torch.tensor([seed]))


def test_an_overflowing_temperature_draws_the_smallest_id_with_a_positive_logit():
    """``logit / 2**-149`` is ``+inf`` for every positive logit: they tie at ``+inf`` whatever the noise, and the
    first by id wins; an engine that takes the row as greedy returns the largest logit, 4."""
    logits = torch.tensor([[-1.0, 3.0, 0.0, 2.0, 5.0]])
    assert scaled(logits, one_row(TINY)).tolist() == [[-math.inf, math.inf, 0.0, math.inf, math.inf]]
    for seed in range(5):
        assert classic_sample(logits, one_row(TINY, seed=seed)).tokens.tolist() == [1]


def test_a_row_whose_every_x_overflows_to_minus_inf_draws_the_first_id():
    assert classic_sample(torch.tensor([[-1.0, -3.0, -2.0]]), one_row(TINY)).tokens.tolist() == [0]


def test_a_flattening_temperature_makes_every_mass_one_and_the_draw_the_noise():
    logits = torch.tensor([[1.0, 4.0, 2.0, 3.0]])
    x = scaled(logits, one_row(1e30))
    assert bool((x[0, 1:] != x[0, :-1]).all())  # x still orders the tokens
    assert masses(x, torch.ones_like(x, dtype=torch.bool)).tolist() == [[1.0, 1.0, 1.0, 1.0]]
    noise = gumbel_noise(torch.tensor([3]), torch.arange(4))
    assert classic_sample(logits, one_row(1e30)).tokens.tolist() == [int(noise.argmax())]


def test_recorded_plans_build_the_parameters_they_always_did():
    """The kinds "mixed" draws among, and their generator draws, are those of the plans in committed repro files
    (values from commit 00ed91d)."""
    inputs = prepare(Case(batch=6, hidden=5, vocab=90, tp=2, ties=("within_shard",), seed=4))
    built = [
        sampling_params(plan, inputs)
        for plan in (SamplePlan("mixed", "mixed", "mixed", 8, 7), SamplePlan("one", "at_tie", "at_mass", 4, 3))
    ]
    assert built[0].top_k.tolist() == [57, 57, 38, 5, 0, 6]
    assert built[0].temperature.tolist()[:3] == [100.0, 0.0, torch.tensor(1e-3).item()]
    assert built[0].seed.tolist()[0] == -4591017089238249127
    assert built[1].top_k.tolist() == [7, 10, 82, 4, 87, 50]
    assert built[1].top_p.tolist()[4] == torch.tensor(0.9965441823005676).item()


def test_an_exact_share_puts_a_token_exactly_on_the_boundary():
    """top_p="exact": on every sampled row some kept token has exactly p of the kept mass above it (flattened by
    T = 1e30 where the row's own masses give no exact share), so ``<`` drops it and ``<=`` keeps it."""
    inputs = prepare(Case(batch=16, hidden=6, vocab=300, tp=4, weights="normal", seed=21, spread=True))
    params = sampling_params(SamplePlan("one", "small", "exact", 8, 1), inputs)
    x = scaled(answer(inputs).target_logits[0], params)
    kept = top_k_mask(x, params.top_k)
    margin, _ = top_p_margin(x, kept, params.top_p)
    on_boundary = ((margin == 0) & kept).any(dim=1)
    assert bool(on_boundary.all()), params
    assert not torch.equal(_top_p(x, kept, params.top_p, "<"), _top_p(x, kept, params.top_p, "<="))


def test_a_cut_tie_group_is_kept_whole_by_the_contract_and_split_by_a_token_walk():
    params = sampling_params(SamplePlan("one", "off", "in_tie", 4, 2), prepare(TIES))
    x = scaled(answer(prepare(TIES)).target_logits[0], params)
    kept = top_k_mask(x, params.top_k)
    whole = _top_p(x, kept, params.top_p, "<")
    for walk in ("split ids up", "split ids down"):
        assert bool((_top_p(x, kept, params.top_p, walk).sum(dim=1) < whole.sum(dim=1)).any())


def test_the_temperature_edges_are_subnormal_an_engine_threshold_or_an_ulp_beside_it():
    inputs = prepare(TIES)
    subnormal = sampling_params(SamplePlan("subnormal", seed=5), inputs).temperature
    assert bool(((subnormal > 0) & (subnormal < torch.finfo(torch.float32).smallest_normal)).all())
    assert TINY in subnormal.tolist()
    near = set(sampling_params(SamplePlan("threshold", seed=6), inputs).temperature.tolist())
    for base in (1e-6, 1e-5):
        t = torch.tensor([base])
        assert near & {float(torch.nextafter(t, t * 0)), float(t), float(torch.nextafter(t, t * 2))}


def test_top_k_at_the_vocabulary_edges():
    inputs = prepare(TIES)
    ks = set(sampling_params(SamplePlan("one", "edge", seed=8), inputs).top_k.tolist())
    assert ks <= {inputs.vocab - 1, inputs.vocab, inputs.vocab + 1} and len(ks) >= 2  # every logit is finite here


def test_a_spread_case_plants_its_specials_on_a_minority_of_rows():
    """The switched rows alone hold infinities (through the weights) or are NaN (through the hidden state), in
    every dtype and whatever the batch (the matmul's kernel changes with it); the argmax cases plant on every row."""
    case = Case(batch=16, hidden=6, vocab=300, tp=4, bias=True, specials=("nan_ranks", "pos_inf"), seed=25)
    for spread, dtype in ((True, "float32"), (True, "bfloat16"), (True, "float16"), (False, "float32")):
        inputs = prepare(Case(**{**case.__dict__, "spread": spread, "dtype": dtype}))
        logits = answer(inputs).draft_logits
        special = ~torch.isfinite(logits).all(dim=1)
        if not spread:
            assert bool(special.all())
            continue
        switched = inputs.hidden[:, -2] == SWITCH
        assert torch.equal(special, switched) and 0 < int(switched.sum()) < 16 // 2
        nan_rows = logits.isnan().all(dim=1)
        assert bool(nan_rows.any()) and bool((switched & ~nan_rows).any())
        assert bool((logits[switched & ~nan_rows] == math.inf).any(dim=1).all())
        for rows in ([0], list(range(16))):  # one row at a time or all: the same values
            one = answer(inputs.with_rows(rows)).draft_logits
            assert torch.equal(one.isnan(), logits[rows].isnan()) and torch.equal(one.isinf(), logits[rows].isinf())


def test_the_classic_model_is_the_classic_sampler():
    inputs = prepare(TIES)
    params = sampling_params(SamplePlan("every", "every", "every", 8, 9), inputs)
    assert torch.equal(
        variant_sample(inputs, params, gumbel_noise, Variant()).tokens,
        oracle_sample(inputs, params, gumbel_noise).tokens.cpu(),
    )
