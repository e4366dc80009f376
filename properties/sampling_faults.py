"""Models of the ways a sharded sampler goes wrong, each a variation of the classic sampler that names its rule.

A failure is named by the first model whose tokens (or kept sets) equal the implementation's on every wrong row;
a model is evidence, never a verdict: the verdict is the classic sampler's.  Like ``properties.faults`` for argmax.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from properties.cases import Inputs
from properties.diagnose import NAN_NOT_MAX, TIE_BY_RANK, draft_targets
from properties.runner import oracle_target_logits
from reference.sampling import (
    Noise,
    Sample,
    SamplingParams,
    scaled,
    top_k_mask,
    top_p_mask,
)
from reference.topk import top_k_ids

NOISE_BY_COLUMN = "noise keyed by shard column, not by global id"
NOISE_BY_DRAFT_ID = "noise keyed by draft id, not by target id (d2t)"
TEMPERATURE_AFTER_NOISE = "temperature applied after the noise: (logit + noise) / T"
NOISE_BEFORE_MASKS = "noise added before the masks: top-k and top-p chose on noised logits"
TOP_K_TIES_DROPPED = "top-k dropped tokens tied at the k-th value"
# drawn from the candidates alone (each rank's top C) where they may miss a kept token; named by the row's masks
TOP_P_OVER_CANDIDATES = "top-p normalised over the candidates only, not over every kept token"
NO_FALLBACK_K_ABOVE_C = "top-k above the candidates C taken from the candidates: no fallback"
NO_FALLBACK_TIED_AT_C = "top-k taken from candidates whose C-th value ties the k-th: no fallback"
NO_FALLBACK_NO_MASK = "sampled from the candidates alone without a mask (every token can win): no fallback"
GREEDY_SAMPLED = "greedy row (temperature 0) sampled: noise added to an argmax row"
TOP_K_SKIPPED = "top-k not applied: the token lies below the k-th value"
TOP_P_SKIPPED = "top-p not applied: the token lies outside the nucleus"
# no model: the token ties the classic one's score, in an order none of the models gives (torch.topk's, say)
TIE_UNORDERED = "tie resolved to another tied token: neither the lowest id nor rank order"


@dataclass(frozen=True)
class Variant:
    """How a faulty sampler departs from the classic one."""

    key: str = "target"  # what the noise is keyed by: target, column (a rank's row index) or draft id
    temperature_after_noise: bool = False
    noise_before_masks: bool = False
    exact_k: bool = False  # top-k keeps exactly k, by id on ties
    candidates_only: str = ""  # masks and draw over each rank's top C tokens alone, on rows of this kind (ROW_KINDS)
    greedy_sampled: bool = False
    skip: str = ""  # "top_k" or "top_p": that mask is never applied
    rank_order: bool = False  # the first maximum in rank order (rank, then shard row), not by id
    nan_lost: bool = False  # a NaN never wins the draw or the argmax (a max that compares with ``>``)


MODELS: tuple[tuple[str, Variant], ...] = (
    (NAN_NOT_MAX, Variant(nan_lost=True)),  # changes NaN rows alone
    (GREEDY_SAMPLED, Variant(greedy_sampled=True)),
    (NOISE_BY_DRAFT_ID, Variant(key="draft")),
    (NOISE_BY_COLUMN, Variant(key="column")),
    (TEMPERATURE_AFTER_NOISE, Variant(temperature_after_noise=True)),
    (TOP_K_SKIPPED, Variant(skip="top_k")),  # a missing step before a misplaced one: the simpler explanation
    (TOP_P_SKIPPED, Variant(skip="top_p")),
    (NOISE_BEFORE_MASKS, Variant(noise_before_masks=True)),
    (TOP_K_TIES_DROPPED, Variant(exact_k=True)),
    (NO_FALLBACK_K_ABOVE_C, Variant(candidates_only="k_above_c")),
    (NO_FALLBACK_TIED_AT_C, Variant(candidates_only="k_within_c")),
    (TOP_P_OVER_CANDIDATES, Variant(candidates_only="top_p")),
    (NO_FALLBACK_NO_MASK, Variant(candidates_only="no_mask")),
    (TIE_BY_RANK, Variant(rank_order=True)),
)


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


def noise_keys(inputs: Inputs, key: str) -> torch.Tensor:
    """int64 ``[V_target]``: the id each target's noise is keyed by under ``key``."""
    vocab = inputs.target_vocab if inputs.d2t is not None else inputs.vocab
    targets = draft_targets(inputs).cpu()
    keys = torch.arange(vocab)
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


def variant_sample(
    inputs: Inputs, params: SamplingParams, noise: Noise, variant: Variant
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens ``[B]`` and kept masks ``[B, V_target]`` of the classic sampler departed from by ``variant`` (CPU)."""
    params = params.to("cpu")
    full, mapped = oracle_target_logits(inputs)
    if variant.greedy_sampled:
        params = replace(params, temperature=torch.where(params.greedy, 1.0, params.temperature))
    x = scaled(full, params)
    g = noise(params.seed, noise_keys(inputs, variant.key)).cpu()
    chosen_on = x + g if variant.noise_before_masks else x
    pool = mapped.expand_as(x)
    if variant.candidates_only:
        rows = row_kinds(params, inputs.vocab)[variant.candidates_only].unsqueeze(1)
        pool = pool & (candidate_set(inputs, x, params.candidates) | ~rows)
    within = chosen_on.masked_fill(~pool, -math.inf)
    top_k = torch.zeros_like(params.top_k) if variant.skip == "top_k" else params.top_k
    top_p = torch.ones_like(params.top_p) if variant.skip == "top_p" else params.top_p
    kept = _exact_k(within, top_k) if variant.exact_k else top_k_mask(within, top_k)
    kept = top_p_mask(within, kept & pool, top_p)
    if variant.temperature_after_noise:
        t = torch.where(params.greedy, 1.0, params.temperature).unsqueeze(1)
        score = (full.float() + g) / t
    else:
        score = x + g
    order = _rank_order(inputs, x.shape[1]) if variant.rank_order else torch.arange(x.shape[1])
    if variant.nan_lost:  # below every number, -inf included, so it wins only a row of NaN
        full, score = (t.masked_fill(t.isnan(), -math.inf) for t in (full, score))
    first = lambda t: order[t[:, order].argmax(dim=1)]  # noqa: E731 - the first maximum in that order
    tokens = torch.where(params.greedy, first(full), first(score.masked_fill(~kept, -math.inf)))
    one = torch.arange(x.shape[1]).unsqueeze(0) == tokens.unsqueeze(1)  # a greedy row keeps its token alone
    return tokens, torch.where(params.greedy.unsqueeze(1), one, kept)


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


def _exact_k(x: torch.Tensor, top_k: torch.Tensor) -> torch.Tensor:
    """Exactly k tokens per row (ties at the k-th value by id), rows with k off keep everything."""
    vocab = x.shape[1]
    kept = torch.ones_like(x, dtype=torch.bool)
    for row, k in enumerate(top_k.tolist()):
        if 0 < k < vocab:
            kept[row] = False
            kept[row, top_k_ids(x[row : row + 1], k)[0]] = True
    return kept


def name_fault(
    inputs: Inputs,
    params: SamplingParams,
    noise: Noise,
    rows: list[int],
    agrees: Callable[[torch.Tensor, torch.Tensor, int], bool],
    confirm: Callable[[Variant], bool] = lambda _variant: True,
) -> str | None:
    """The first model that ``agrees`` with the implementation on every row of ``rows`` (given the model's tokens
    and kept masks), or None.  Callers pass every row they can judge, right ones too: a model that changes a row the
    implementation got right is refuted by it; ``confirm`` may refute a model by experiment."""
    for rule, variant in MODELS:
        if variant.key == "draft" and inputs.d2t is None:
            continue
        tokens, kept = variant_sample(inputs, params, noise, variant)
        if all(agrees(tokens, kept, row) for row in rows) and confirm(variant):
            return rule
    return None


def tie_rule(
    inputs: Inputs, params: SamplingParams, noise: Noise, rows: list[int], tokens: torch.Tensor, want: Sample
) -> str | None:
    """:data:`TIE_UNORDERED` where on every row of ``rows`` the implementation's token (``tokens``) ties the classic
    sampler's (``want``): a token it may draw whose score (greedy: the logit; sampled: ``x + noise``) equals the
    classic token's, NaN with NaN."""
    params = params.to("cpu")
    full, mapped = oracle_target_logits(inputs)
    x = scaled(full, params)
    greedy = params.greedy.unsqueeze(1)
    score = torch.where(greedy, full.float(), x + noise(params.seed, torch.arange(x.shape[1])).cpu())
    drawable = torch.where(greedy, mapped.expand_as(x), want.kept.cpu())
    for row in rows:
        got, best = int(tokens[row]), int(want.tokens[row])
        if not (0 <= got < x.shape[1] and bool(drawable[row, got])):
            return None
        a, b = score[row, got], score[row, best]
        if not (bool(a == b) or bool(a.isnan() & b.isnan())):
            return None
    return TIE_UNORDERED
