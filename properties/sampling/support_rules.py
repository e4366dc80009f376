"""The classic draw's support and what drops a token from it: rules that name the mask or the special value at
fault, shared by the support property, token-exactness and the distribution."""

from __future__ import annotations

import math

import torch

from properties.argmax.diagnosis import non_token_rule
from properties.cases.case import Inputs
from properties.oracle import answer
from properties.sampling.stages import overflowed
from reference.oracle import tokens_from_draft_logits
from reference.sampling import SamplingParams, kept_mask, scaled, support_mask, top_k_mask

GREEDY_WRONG = "greedy row's token is not the argmax"
TOP_K_DROPS = "sampled a token top-k drops: its x lies below the k-th value"
TOP_P_DROPS = "sampled a token top-p drops: the kept mass above it is at least p of the kept mass"
NAN_MUST_WIN = "NaN not treated as the maximum: the first NaN must win"
INF_MUST_WIN = "a +inf row drew another token: +inf + noise is +inf, and the first +inf wins"
ALL_NEG_INF = "every kept x is -inf: every score is, and the first id (target 0) wins"
ZERO_PROBABILITY = "sampled a kept token whose x is -inf beside finite ones: its probability is 0"
# x = logit / T overflowed float32 at the row's temperature (no logit is infinite): the infinity is the temperature's
OVERFLOW_TIE = "logit / T overflowed to +inf at the row's temperature, and another +inf was drawn: the first +inf wins"
OVERFLOW_MISSED = "logit / T overflowed to +inf at the row's temperature, yet a finite x was drawn: an +inf must win"


def support(inputs: Inputs, params: SamplingParams) -> torch.Tensor:
    """bool ``[B, V_target]`` on the CPU: each row's support (a greedy row: its argmax alone)."""
    full, mapped = answer(inputs).target_logits
    params = params.to("cpu")
    x = scaled(full, params)
    sampled = support_mask(x, kept_mask(x, params) & mapped)
    ids = torch.arange(full.shape[1])
    return torch.where(params.greedy.unsqueeze(1), ids == _greedy(inputs).unsqueeze(1), sampled)


def _greedy(inputs: Inputs) -> torch.Tensor:
    """Each row's argmax token (by target id), as a greedy row takes it."""
    d2t = None if inputs.d2t is None else inputs.d2t.cpu()
    return tokens_from_draft_logits(answer(inputs).draft_logits.cpu(), d2t, inputs.target_vocab)


def row_overflowed(inputs: Inputs, params: SamplingParams, row: int) -> bool:
    """:func:`overflowed` on ``row``'s classic kept set (a sampled row)."""
    params = params.to("cpu").rows([row])
    if bool(params.greedy[0]):
        return False
    full, mapped = answer(inputs).target_logits
    x = scaled(full[row : row + 1], params)
    return overflowed(full[row], x[0], (kept_mask(x, params) & mapped)[0])


def outside_rule(inputs: Inputs, params: SamplingParams, row: int, token: int) -> str:
    """What drops ``token`` from ``row``'s support: the mask, or the special value that must win (a NaN, a ``+inf``,
    one ``logit / T`` made by overflowing).  A row's argmax lies outside its support only where ``x`` overflowed on
    several tokens: that is the overflow's rule, not a greedy threshold's (which the fault models name, with their
    experiments, where a row without overflow shows it)."""
    rule = non_token_rule(inputs, token)
    if rule:
        return rule
    params = params.to("cpu").rows([row])
    if bool(params.greedy[0]):
        return GREEDY_WRONG
    full, mapped = answer(inputs).target_logits
    x = scaled(full[row : row + 1], params)
    kept = kept_mask(x, params) & mapped
    picked = x[0, kept[0]]
    if bool(picked.isnan().any()):
        return NAN_MUST_WIN
    if bool((picked == math.inf).any()):
        if not overflowed(full[row], x[0], kept[0]):
            return INF_MUST_WIN
        return OVERFLOW_TIE if 0 <= token < x.shape[1] and float(x[0, token]) == math.inf else OVERFLOW_MISSED
    if not bool(torch.isfinite(picked).any()):
        return ALL_NEG_INF
    if not bool(top_k_mask(x, params.top_k)[0, token]):
        return TOP_K_DROPS
    if not bool(kept[0, token]):
        return TOP_P_DROPS
    return ZERO_PROBABILITY
