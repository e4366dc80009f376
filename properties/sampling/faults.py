"""Models of the ways a sharded sampler goes wrong, each a variation of the classic sampler that names its rule.

A model is evidence, never a verdict (the verdict is the classic sampler's), and it names a failure only when it is
the fault: it must reproduce every row the property judges, wrong rows and right ones (a model that changes a row
the sampler got right is refuted by it), and then survive experiments (:mod:`properties.sampling.experiments`)
chosen to tell apart the models that fit one batch: the sampler runs again with the masks, the temperature or the
seeds changed, and the model must predict what it does.  Like ``properties.argmax.faults`` for argmax.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from properties.argmax.diagnosis import NAN_NOT_MAX, TIE_BY_RANK, draft_targets
from properties.cases.case import Inputs
from properties.oracle import answer
from properties.sampling.support_rules import row_overflowed
from reference.sampling import (
    Noise,
    Sample,
    SamplingParams,
    has_probabilities,
    log_probs,
    masses,
    scaled,
    top_k_mask,
    top_p_margin,
    top_p_mask,
)
from reference.topk import top_k_ids

NOISE_BY_COLUMN = "noise keyed by shard column, not by global id"
NOISE_BY_DRAFT_ID = "noise keyed by draft id, not by target id (d2t)"
NOISE_BY_POSITION = "noise keyed by candidate position (rank, then place by x), not by token id"
TEMPERATURE_AFTER_NOISE = "temperature applied after the noise: (logit + noise) / T"
TEMPERATURE_THRESHOLD = "temperature below a threshold taken as greedy: a sampled row drew the argmax"
X_IN_HEAD_DTYPE = "logits / T computed in the head's dtype, then widened: x must be float32(logit) / T"
X_IN_FLOAT64 = "logits / T and the scores computed in float64: x must be float32, rounding and overflowing as float32"
NOISE_BEFORE_MASKS = "noise added before the masks: top-k and top-p chose on noised logits"
TOP_K_TIES_DROPPED = "top-k dropped tokens tied at the k-th value"
TOP_P_AT_OR_BELOW = "top-p kept a token whose mass above is exactly p of the kept mass: <= instead of <"
TOP_P_SPLITS_TIES = "top-p cut a tie group at its boundary: tokens tied there must stay or go together"
REPORTED_BEFORE_TOP_P = "kept set or processed log-probability taken after top-k, before top-p"
PER_SHARD = {  # a log-probability normalised by the owner rank's log-sum-exp: the rules of the two kinds
    kind: f"{kind} log-probability normalised per shard: the owner rank's log-sum-exp, not the row's"
    for kind in ("raw", "processed")
}
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
MODELS: tuple[tuple[str, Variant], ...] = (
    (NAN_NOT_MAX, Variant(nan_lost=True)),  # changes NaN rows alone
    (GREEDY_SAMPLED, Variant(greedy_sampled=True)),
    (TEMPERATURE_THRESHOLD, Variant(greedy_below=FITTED)),
    (X_IN_HEAD_DTYPE, Variant(x_in_dtype=True)),
    (X_IN_FLOAT64, Variant(x_in_float64=True)),
    (NOISE_BY_DRAFT_ID, Variant(key="draft")),
    (NOISE_BY_COLUMN, Variant(key="column")),
    (NOISE_BY_POSITION, Variant(key="position")),
    (TEMPERATURE_AFTER_NOISE, Variant(temperature_after_noise=True)),
    (TOP_K_SKIPPED, Variant(skip="top_k")),  # a missing step before a misplaced one: the simpler explanation
    (TOP_P_SKIPPED, Variant(skip="top_p")),
    (TOP_P_AT_OR_BELOW, Variant(top_p="<=")),
    (TOP_P_SPLITS_TIES, Variant(top_p="split ids up")),  # the lower ids of the group stay
    (TOP_P_SPLITS_TIES, Variant(top_p="split ids down")),  # the higher ids stay (an ascending sort from the tail)
    (NOISE_BEFORE_MASKS, Variant(noise_before_masks=True)),
    (TOP_K_TIES_DROPPED, Variant(exact_k=True)),
    (REPORTED_BEFORE_TOP_P, Variant(reported_before_top_p=True)),
    (PER_SHARD["raw"], Variant(per_shard="raw")),
    (PER_SHARD["processed"], Variant(per_shard="processed")),
    (NO_FALLBACK_K_ABOVE_C, Variant(candidates_only="k_above_c")),
    (NO_FALLBACK_TIED_AT_C, Variant(candidates_only="k_within_c")),
    (TOP_P_OVER_CANDIDATES, Variant(candidates_only="top_p")),
    (NO_FALLBACK_NO_MASK, Variant(candidates_only="no_mask")),
    (TIE_BY_RANK, Variant(rank_order=True)),
)


@dataclass(frozen=True)
class Prediction:
    """A model's answer (CPU): tokens ``[B]``, kept masks ``[B, V_target]``, float64 log-probs ``[B, 2]`` at its
    tokens."""

    tokens: torch.Tensor
    kept: torch.Tensor
    log_probs: torch.Tensor


@dataclass(frozen=True)
class Observed:
    """What one run of the sampler gave (CPU), with the parameters it ran with: tokens ``[B]``, kept masks
    ``[B, V_target]`` and log-probs ``[B, 2]`` where it reports them, and ``loose``, the tokens whose place against
    top-p rounding may decide."""

    params: SamplingParams
    tokens: torch.Tensor
    kept: torch.Tensor | None
    log_probs: torch.Tensor | None
    loose: torch.Tensor
    logits: torch.Tensor  # the oracle's logits by target id, ``[B, V_target]``

    def rows(self, rows: list[int]) -> Observed:
        """The run's ``rows`` alone."""
        cut = lambda t: None if t is None else t[rows]  # noqa: E731
        return Observed(self.params.rows(rows), *(cut(t) for t in (self.tokens, self.kept, self.log_probs)),
                        self.loose[rows], self.logits[rows])  # fmt: skip


Agrees = Callable[[Prediction, Observed, int], bool]  # a prediction reproduces a run's row, as a property judges


@dataclass(frozen=True)
class Subject:
    """What the diagnosis knows of a sampler: its noise, the masks it takes, whether it draws from each rank's top C
    candidates (``fn.draws_from_candidates``), and how to run it again (None: that run failed)."""

    noise: Noise
    masks: frozenset[str]
    candidates: bool
    rerun: Callable[[SamplingParams], Observed | None]


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
    return Prediction(tokens, shown, lp)


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


def _claim(
    variant: Variant, inputs: Inputs, params: SamplingParams, seen: Observed, classic: Prediction, wrong: list[int]
) -> bool:
    """What a model must show beyond reproducing the run, on the rows the classic sampler gets wrong (``wrong``; a
    run with none claims nothing):

    * a skipped mask: the first wrong row whose token is not the classic one's holds a token outside that mask
      (top-p: inside top-k);
    * a greedy threshold, or ``x`` in float64: some wrong row (below the threshold) has an ``x`` that did not
      overflow.  Where ``logit / T`` overflows on several tokens, a sampler that draws the largest logit looks taken
      as greedy, or as one whose ``x`` never overflows, but all that shows is the overflow's tie
      (:data:`properties.sampling.support_rules.OVERFLOW_TIE`): only a row without it tells them apart.
    """
    if not wrong:
        return True
    if variant.greedy_below or variant.x_in_float64:
        below = [r for r in wrong if float(params.temperature[r]) < (variant.greedy_below or math.inf)]
        return any(not bool(params.greedy[r]) and not row_overflowed(inputs, params, r) for r in below)
    tokens = [r for r in wrong if int(seen.tokens[r]) != int(classic.tokens[r])]
    if not variant.skip or not tokens:
        return True
    row, token = tokens[0], int(seen.tokens[tokens[0]])
    cpu = params.to("cpu")
    by_k = top_k_mask(scaled(answer(inputs).target_logits[0], cpu), cpu.top_k)[row]
    return 0 <= token < by_k.numel() and bool(by_k[token]) == (variant.skip == "top_p")


def candidates(
    inputs: Inputs, params: SamplingParams, subject: Subject, seen: Observed, rows: list[int], agrees: Agrees
) -> list[tuple[str, Variant]]:
    """Every model (fitted to the run) that reproduces ``rows`` of the sampler's run ``seen``, by ``agrees``, and its
    claim: ``(rule, variant)`` in the order of :data:`MODELS`."""
    found = []
    classic = variant_sample(inputs, params, subject.noise, Variant())
    wrong = [r for r in rows if not agrees(classic, seen, r)]
    # a model must reproduce the first row the classic sampler gets wrong: tried on that row alone first, it costs
    # a row's work to refute, not a batch's
    lead = (inputs.with_rows(wrong[:1]), params.rows(wrong[:1]), seen.rows(wrong[:1])) if wrong else None
    for rule, model in MODELS:
        if (model.key == "draft" and inputs.d2t is None) or (model.candidates_only and not subject.candidates):
            continue
        for variant in instances(model, params):
            if lead is not None and not agrees(variant_sample(lead[0], lead[1], subject.noise, variant), lead[2], 0):
                continue
            prediction = variant_sample(inputs, params, subject.noise, variant)
            if all(agrees(prediction, seen, r) for r in rows) and _claim(variant, inputs, params, seen, classic, wrong):
                found.append((rule, variant))
                break
    return found


def tie_rule(
    inputs: Inputs, params: SamplingParams, noise: Noise, rows: list[int], tokens: torch.Tensor, want: Sample
) -> str | None:
    """:data:`TIE_UNORDERED` where on every row of ``rows`` the implementation's token (``tokens``) ties the classic
    sampler's (``want``): a token it may draw whose score (greedy: the logit; sampled: ``x + noise``) equals the
    classic token's, NaN with NaN."""
    params = params.to("cpu")
    full, mapped = answer(inputs).target_logits
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
