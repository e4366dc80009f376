"""The support property: every sampled token is one the classic sampler can draw, whatever the noise.

Token-exactness needs the sampler's noise; a sampler with its own randomness (one key per step, noise keyed by
candidate position) cannot be judged token for token, but its every token must still lie in the classic draw's
support (:func:`reference.sampling.support_mask`), on every example.  A token outside it is named by what drops
it: top-k, top-p, a NaN or ``+inf`` that must win, a probability of 0, or a temperature taken as greedy.
"""

from __future__ import annotations

import math

import torch
from hypothesis import event
from hypothesis.control import currently_in_test_context

from properties.cases import Inputs
from properties.diagnose import fail, non_token_rule, repro_extra
from properties.runner import oracle_draft_logits, oracle_target_logits
from properties.sample_plans import SamplePlan, plan_fields
from properties.sampling import (
    GREEDY_WRONG,
    Drawn,
    boundary,
    divergent,
    noise_key_of,
    noise_of,
    oracle_sample,
    run_sampler,
)
from properties.sampling_faults import TEMPERATURE_THRESHOLD
from reference.oracle import tokens_from_draft_logits
from reference.sampling import SamplingParams, kept_mask, scaled, support_mask, top_k_mask
from sharded.impls import Impl

SAMPLE_SUPPORT = "support: every sampled token is one the classic sampler can draw, whatever the noise"
TOP_K_DROPS = "sampled a token top-k drops: its x lies below the k-th value"
TOP_P_DROPS = "sampled a token top-p drops: the kept mass above it is at least p of the kept mass"
NAN_MUST_WIN = "NaN not treated as the maximum: the first NaN must win"
INF_MUST_WIN = "a +inf row drew another token: +inf + noise is +inf, and the first +inf wins"
ALL_NEG_INF = "every kept x is -inf: every score is, and the first id (target 0) wins"
ZERO_PROBABILITY = "sampled a kept token whose x is -inf beside finite ones: its probability is 0"


def support(inputs: Inputs, params: SamplingParams) -> torch.Tensor:
    """bool ``[B, V_target]`` on the CPU: each row's support (a greedy row: its argmax alone)."""
    full, mapped = oracle_target_logits(inputs)
    params = params.to("cpu")
    x = scaled(full, params)
    sampled = support_mask(x, kept_mask(x, params) & mapped)
    ids = torch.arange(full.shape[1])
    return torch.where(params.greedy.unsqueeze(1), ids == _greedy(inputs).unsqueeze(1), sampled)


def _greedy(inputs: Inputs) -> torch.Tensor:
    """Each row's argmax token (by target id), as a greedy row takes it."""
    d2t = None if inputs.d2t is None else inputs.d2t.cpu()
    return tokens_from_draft_logits(oracle_draft_logits(inputs).cpu(), d2t, inputs.target_vocab)


def outside_rule(inputs: Inputs, params: SamplingParams, row: int, token: int) -> str:
    """What drops ``token`` from ``row``'s support: the mask, the special value that must win, or the threshold."""
    rule = non_token_rule(inputs, token)
    if rule:
        return rule
    params = params.to("cpu").rows([row])
    if bool(params.greedy[0]):
        return GREEDY_WRONG
    full, mapped = oracle_target_logits(inputs)
    x = scaled(full[row : row + 1], params)
    kept = kept_mask(x, params) & mapped
    if token == int(_greedy(inputs)[row]):
        return TEMPERATURE_THRESHOLD
    picked = x[0, kept[0]]
    if bool(picked.isnan().any()):
        return NAN_MUST_WIN
    if bool((picked == math.inf).any()):
        return INF_MUST_WIN
    if not bool(torch.isfinite(picked).any()):
        return ALL_NEG_INF
    if not bool(top_k_mask(x, params.top_k)[0, token]):
        return TOP_K_DROPS
    if not bool(kept[0, token]):
        return TOP_P_DROPS
    return ZERO_PROBABILITY


def check_support(impl: Impl, inputs: Inputs, plan: SamplePlan) -> tuple[Drawn, SamplingParams]:
    """Every row's token lies in its support; a token within top-p's rounding slack of the boundary counts as in,
    and so does the named divergence of an all ``-inf`` row with d2t."""
    with repro_extra(sampling=plan_fields(plan)):
        drawn, params = run_sampler(impl, inputs, plan, SAMPLE_SUPPORT)
        allowed = support(inputs, params) | boundary(inputs, params.to("cpu"))
        tokens, vocab = drawn.tokens.cpu(), allowed.shape[1]
        for row, token in enumerate(tokens.tolist()):
            if 0 <= token < vocab and bool(allowed[row, token]):
                continue
            want = oracle_sample(inputs, params, noise_of(impl))
            if divergent(inputs, params, want, row, token):
                continue
            p = params.to("cpu")
            lines = [
                f"row {row}: temperature {float(p.temperature[row]):g}, top_k {int(p.top_k[row])}, "
                f"top_p {float(p.top_p[row])!r}",
                f"row {row}: got {token}; the support holds {allowed[row].sum()} id(s), "
                f"first {allowed[row].nonzero().flatten()[:5].tolist()}",
            ]
            fail(outside_rule(inputs, params, row, token), lines, impl, inputs, SAMPLE_SUPPORT)
        return drawn, params


def check_named_divergence(impl: Impl, inputs: Inputs, plan: SamplePlan) -> None:
    """Token-exactness for a sampler whose noise no token noise can declare (``fn.noise_key``, such as ``"candidate
    position"``): greedy rows exactly, sampled rows within the support; a sampled row whose token is not the one the
    contract's noise draws is the named divergence, counted as a Hypothesis event and never a failure."""
    drawn, params = check_support(impl, inputs, plan)
    want = oracle_sample(inputs, params, noise_of(impl)).tokens.cpu()
    if currently_in_test_context() and bool(((drawn.tokens.cpu() != want) & ~params.greedy.cpu()).any()):
        event(f"named divergence: noise keyed by {noise_key_of(impl)}, not by token id")
