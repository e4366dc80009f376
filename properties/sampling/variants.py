"""The fault models' mechanics: how a faulty sampler departs from the classic one (:class:`Variant`), and the
classic sampler run with that departure (:func:`variant_sample`), its answer a :class:`Prediction`.

What each departure is called, and which are tried in which order, is :mod:`properties.sampling.faults`'.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from properties.argmax.diagnosis import draft_targets
from properties.cases.case import Inputs
from properties.oracle import answer
from reference.sampling import (
    Noise,
    SamplingParams,
    has_probabilities,
    log_probs,
    masses,
    scaled,
    support_mask,
    top_k_mask,
    top_p_margin,
    top_p_mask,
)
from reference.topk import top_k_ids


@dataclass(frozen=True)
class Variant:
    """How a faulty sampler departs from the classic one."""

    key: str = "target"  # the noise's key: target, column (a rank's row index), draft id, or candidate position
    temperature_after_noise: bool = False
    greedy_below: float = 0.0  # rows with 0 < T < this are greedy; math.inf: to be fitted to the sampler's rows
    x_in_dtype: bool = False  # x = logit / T in the head's dtype, widened afterwards
    x_in_float64: bool = False  # x = logit / T, its masks and its scores in float64: no float32 rounding or overflow
    noise_before_masks: bool = False
    exact_k: bool = False  # top-k keeps exactly k, by id on ties
    top_p: str = "<"  # "<=": keeps a token whose mass above is p; "split ids up"/"split ids down": token by token
    reported_before_top_p: bool = False  # draws right, but reports the kept set and log-prob of top-k's set
    per_shard: str = ""  # "raw" or "processed": that log-probability normalised over the owner rank's tokens only
    candidates_only: str = ""  # masks and draw over each rank's top C tokens alone, on rows of this kind (ROW_KINDS)
    greedy_sampled: bool = False
    skip: str = ""  # "top_k" or "top_p": that mask is never applied
    rank_order: bool = False  # the first maximum in rank order (rank, then shard row), not by id
    nan_lost: bool = False  # a NaN never wins the draw or the argmax (a max that compares with ``>``)


FITTED = math.inf


@dataclass(frozen=True)
class Prediction:
    """A model's answer (CPU): tokens ``[B]``, kept masks ``[B, V_target]``, float64 log-probs ``[B, 2]`` at its
    tokens, its support ``[B, V_target]`` (the tokens it draws for some noise; a greedy row: its token), and what
    gives its log-probabilities at any token: its ``x`` and the rows it takes as greedy."""

    tokens: torch.Tensor
    kept: torch.Tensor
    log_probs: torch.Tensor
    support: torch.Tensor
    x: torch.Tensor
    greedy: torch.Tensor


def holds(mask: torch.Tensor, token: int) -> bool:
    """Whether the bool ``[V]`` ``mask`` holds ``token`` (an id outside it: never)."""
    return 0 <= token < mask.numel() and bool(mask[token])


def row_kinds(params: SamplingParams, vocab: int) -> dict[str, torch.Tensor]:
    """bool ``[B]`` for each kind of sampled row a candidate path must treat apart."""
    k, p, c = params.top_k, params.top_p, params.candidates
    k_on = (k > 0) & (k < vocab) & ~params.greedy
    return {
        "k_above_c": k_on & (k > c),
        "k_within_c": k_on & (k <= c),
        "top_p": ~k_on & (p < 1) & ~params.greedy,
        "no_mask": ~k_on & (p >= 1) & ~params.greedy,
    }


def noise_keys(inputs: Inputs, key: str, x: torch.Tensor) -> torch.Tensor:
    """int64 ``[V_target]`` (``[B, V_target]`` by position): the id each target's noise is keyed by under ``key``.
    A candidate position is the rank's index times its rows, plus the token's place among the rank's tokens by
    ``x`` descending (ties by target id): what a sampler over the gathered candidates keys by."""
    vocab = inputs.target_vocab if inputs.d2t is not None else inputs.vocab
    targets = draft_targets(inputs).cpu()
    keys = torch.arange(vocab)
    if key == "position":
        keys = keys.expand(x.shape[0], -1).clone()
        for lay in inputs.layouts:
            mine = targets[lay.token_ids()].sort().values
            if mine.numel():
                place = x[:, mine].sort(dim=1, descending=True, stable=True).indices
                keys.scatter_(1, mine[place], lay.rank * lay.size + torch.arange(mine.numel()).expand_as(place))
        return keys
    if key == "draft":
        keys[targets] = torch.arange(inputs.vocab)
    elif key == "column":
        for lay in inputs.layouts:
            keys[targets[lay.token_ids()]] = lay.token_rows()
    return keys


def candidate_set(inputs: Inputs, x: torch.Tensor, c: int) -> torch.Tensor:
    """bool ``[B, V_target]``: the union of every rank's top ``c`` tokens by (x, target id)."""
    targets = draft_targets(inputs).cpu()
    found = torch.zeros_like(x, dtype=torch.bool)
    for lay in inputs.layouts:
        mine = targets[lay.token_ids()]
        if not mine.numel():
            continue
        ranked = top_k_ids(x[:, mine], min(c, mine.numel()))
        found.scatter_(1, mine[ranked], True)
    return found


def variant_sample(inputs: Inputs, params: SamplingParams, noise: Noise, variant: Variant) -> Prediction:
    """The classic sampler departed from by ``variant`` (CPU)."""
    params = params.to("cpu")
    full, mapped = answer(inputs).target_logits
    if variant.greedy_sampled:
        params = replace(params, temperature=torch.where(params.greedy, 1.0, params.temperature))
    if variant.greedy_below:
        below = params.temperature < variant.greedy_below
        params = replace(params, temperature=params.temperature.masked_fill(below, 0.0))
    x = scaled(full, params)
    if variant.x_in_dtype:
        t = torch.where(params.greedy, 1.0, params.temperature).unsqueeze(1)
        x = (full / t.to(full.dtype)).float()
    if variant.x_in_float64:
        x = full.double() / torch.where(params.greedy, 1.0, params.temperature).double().unsqueeze(1)
    g = noise(params.seed, noise_keys(inputs, variant.key, x)).cpu()
    chosen_on = x + g if variant.noise_before_masks else x
    pool = mapped.expand_as(x)
    if variant.candidates_only:
        rows = row_kinds(params, inputs.vocab)[variant.candidates_only].unsqueeze(1)
        pool = pool & (candidate_set(inputs, x, params.candidates) | ~rows)
    within = chosen_on.masked_fill(~pool, -math.inf)
    top_k = torch.zeros_like(params.top_k) if variant.skip == "top_k" else params.top_k
    top_p = torch.ones_like(params.top_p) if variant.skip == "top_p" else params.top_p
    by_k = (_exact_k(within, top_k, pool) if variant.exact_k else top_k_mask(within, top_k)) & pool
    kept = _top_p(within, by_k, top_p, variant.top_p)
    if variant.temperature_after_noise:
        t = torch.where(params.greedy, 1.0, params.temperature).unsqueeze(1)
        score = (full.float() + g) / t
    else:
        score = x + g
    order = _rank_order(inputs, x.shape[1]) if variant.rank_order else torch.arange(x.shape[1])
    if variant.nan_lost:  # below every number, -inf included, so it wins only a row of NaN
        full, score = (t.masked_fill(t.isnan(), -math.inf) for t in (full, score))
    first = lambda t: order[t[:, order].argmax(dim=1)]  # noqa: E731 - the first maximum in that order
    greedy = params.greedy
    tokens = torch.where(greedy, first(full), first(score.masked_fill(~kept, -math.inf)))
    # a row whose scores are all -inf: the classic path's target 0 no draft id maps to is, on a local path, the
    # smallest target one does (the named divergence); a model says what a sharded sampler would
    tokens = tokens.masked_fill((tokens == 0) & ~mapped[0], int(mapped.int().argmax()))
    one = torch.arange(x.shape[1]).unsqueeze(0) == tokens.unsqueeze(1)  # a greedy row keeps its token alone
    shown = torch.where(greedy.unsqueeze(1), one, by_k if variant.reported_before_top_p else kept)
    lp = log_probs(full, x, shown, tokens, greedy)
    if variant.per_shard:  # over the owner rank's tokens; a greedy row's processed log-probability is its raw one
        raw = variant.per_shard == "raw"
        values = full.double() if raw else x.double().masked_fill(~shown, -math.inf)
        lp[:, 0 if raw else 1] = _per_shard(inputs, values).gather(1, tokens.unsqueeze(1)).squeeze(1)
        lp[:, 1] = torch.where(greedy, lp[:, 0], lp[:, 1])
    drawable = support_mask(x.masked_fill(x.isnan(), -math.inf) if variant.nan_lost else x, kept)
    single = drawable.sum(dim=1, keepdim=True) == 1  # a NaN, a +inf, all -inf: the model's own first one
    return Prediction(tokens, shown, lp, torch.where(greedy.unsqueeze(1) | single, one, drawable), x, greedy)


def _per_shard(inputs: Inputs, values: torch.Tensor) -> torch.Tensor:
    """float64 ``[B, V_target]``: each token's ``log_softmax`` over its own rank's tokens only."""
    targets = draft_targets(inputs).cpu()
    out = torch.full_like(values, math.nan)
    for lay in inputs.layouts:
        mine = targets[lay.token_ids()]
        if mine.numel():
            out[:, mine] = torch.log_softmax(values[:, mine], dim=1)
    return out


def _top_p(x: torch.Tensor, kept: torch.Tensor, top_p: torch.Tensor, how: str) -> torch.Tensor:
    """The top-p mask as the contract has it (``"<"``), or as a faulty sampler applies it."""
    if how == "<":
        return top_p_mask(x, kept, top_p)
    on = (top_p < 1) & has_probabilities(x, kept)
    margin, total = top_p_margin(x, kept, top_p)
    if how == "<=":
        return kept & ((margin <= 0) | ~on.unsqueeze(1))
    e = masses(x, kept)  # token by token, largest first, ties by id up or down: the mass before each in that order
    ids = torch.arange(x.shape[1], dtype=torch.float64)
    ties = (-ids if how == "split ids up" else ids).expand_as(e)
    walk = torch.stack([x.double().masked_fill(~kept, -math.inf), ties])
    order = _lexsort_descending(walk)
    sorted_e = e.gather(1, order)
    before = torch.empty_like(e).scatter_(1, order, sorted_e.cumsum(dim=1) - sorted_e)
    return kept & ((before < top_p.double().unsqueeze(1) * total) | ~on.unsqueeze(1))


def _lexsort_descending(keys: torch.Tensor) -> torch.Tensor:
    """Indices ``[B, V]`` ordering by ``keys[0]`` descending, then ``keys[1]`` descending (NaN first)."""
    order = keys[1].expand(keys.shape[1:]).sort(dim=1, descending=True, stable=True).indices
    first = keys[0].nan_to_num(nan=math.inf).gather(1, order)
    return order.gather(1, first.sort(dim=1, descending=True, stable=True).indices)


def _rank_order(inputs: Inputs, vocab: int) -> torch.Tensor:
    """Target ids in the order a rank-order reduction meets them: rank by rank, each shard's rows in order, the
    targets no draft id maps to last."""
    targets = draft_targets(inputs).cpu()
    met = torch.cat([targets[lay.token_ids()] for lay in inputs.layouts])
    ids, where = met.unique(return_inverse=True)
    firsts = torch.full_like(ids, met.numel()).scatter_reduce(0, where, torch.arange(met.numel()), "amin")
    seen = met[firsts.sort().values]  # each target where a rank first offers it
    rest = torch.ones(vocab, dtype=torch.bool)
    rest[seen] = False
    return torch.cat([seen, rest.nonzero().flatten()])


def _exact_k(x: torch.Tensor, top_k: torch.Tensor, pool: torch.Tensor) -> torch.Tensor:
    """Exactly k of the ``pool``'s tokens per row (ties at the k-th value by id); rows whose k is off or at least
    the pool's size keep everything."""
    kept = torch.ones_like(x, dtype=torch.bool)
    for row, k in enumerate(top_k.tolist()):
        ids = pool[row].nonzero().flatten()
        if 0 < k < ids.numel():
            kept[row] = False
            kept[row, ids[top_k_ids(x[row : row + 1, ids], k)[0]]] = True
    return kept


def instances(variant: Variant, params: SamplingParams) -> list[Variant]:
    """``variant``, or where it has a free parameter, one variant per value the run can tell apart, in order.

    The greedy threshold: just above each sampled row's temperature, smallest first (the first that reproduces the
    run is the model): every row at or below it is taken as greedy.
    """
    if variant.greedy_below != FITTED:
        return [variant]
    temperatures = params.temperature[~params.greedy].cpu().unique()  # ascending
    above = torch.nextafter(temperatures, torch.full_like(temperatures, math.inf))
    return [replace(variant, greedy_below=float(t)) for t in above]
