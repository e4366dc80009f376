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
from dataclasses import dataclass

import torch

from properties.argmax.diagnosis import NAN_NOT_MAX, TIE_BY_RANK
from properties.cases.case import Inputs
from properties.oracle import answer
from properties.sampling.support_rules import row_overflowed
from properties.sampling.variants import FITTED, Prediction, Variant, holds, instances, variant_sample
from reference.sampling import (
    Noise,
    Sample,
    SamplingParams,
    scaled,
    top_k_mask,
)

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
# the models a sampler with its own randomness cannot be judged by: the noise's key and when it is added (the
# support stays the classic one's, or with the noise before the masks, depends on the noise), and the log-probability
NOISE_MODELS = frozenset(
    v for _, v in MODELS if v.key != "target" or v.temperature_after_noise or v.noise_before_masks or v.per_shard
)


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
    candidates (``fn.draws_from_candidates``), how to run it again (None: that run failed), and whether its noise is
    its own (no token noise declares it: a model is then judged by its support and kept set, not its tokens)."""

    noise: Noise
    masks: frozenset[str]
    candidates: bool
    rerun: Callable[[SamplingParams], Observed | None]
    own_randomness: bool = False
    draw: Callable[[Inputs, SamplingParams], torch.Tensor | None] | None = None  # tokens on other inputs (or None)


def _drawable(prediction: Prediction, seen: Observed, row: int, own: bool) -> bool:
    """Whether ``row``'s token is one ``prediction`` draws: its token, or (``own``: a sampler with its own noise) one
    in its support."""
    token = int(seen.tokens[row])
    return holds(prediction.support[row], token) if own else token == int(prediction.tokens[row])


def _claim(
    variant: Variant,
    inputs: Inputs,
    params: SamplingParams,
    seen: Observed,
    classic: Prediction,
    wrong: list[int],
    own: bool,
) -> bool:
    """What a model must show beyond reproducing the run, on the rows the classic sampler gets wrong (``wrong``; a
    run with none claims nothing):

    * a skipped mask: the first wrong row whose token the classic sampler does not draw (``own``: outside its
      support) holds a token outside that mask (top-p: inside top-k);
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
    tokens = [r for r in wrong if not _drawable(classic, seen, r, own)]
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
    own = subject.own_randomness
    for rule, model in MODELS:
        if (model.key == "draft" and inputs.d2t is None) or (model.candidates_only and not subject.candidates):
            continue
        if own and model in NOISE_MODELS:  # the sampler's noise is its own: what these change, no support shows
            continue
        for variant in instances(model, params):
            if lead is not None and not agrees(variant_sample(lead[0], lead[1], subject.noise, variant), lead[2], 0):
                continue
            prediction = variant_sample(inputs, params, subject.noise, variant)
            if all(agrees(prediction, seen, r) for r in rows) and _claim(
                variant, inputs, params, seen, classic, wrong, own
            ):
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
