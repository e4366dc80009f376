"""Sampling on vocab-sharded logits without gathering them: Gumbel-max pairs, and candidates with a log-normaliser.

Both follow the sampling contract (docs/sampling.md): called on every rank with ``sampling=SamplingParams``, they
return ``(tokens [B], log_probs float32 [B, 2] (raw, processed), kept ids int64 [B, K] (-1: none) or None,
notes)``, the same on every rank.  The noise is ``reference.sampling.gumbel_noise`` of (row seed, target id).

* :func:`gumbel_pairs` adds each token's noise on its own rank and sends one packed (score, id) key per row, with
  the token's two logits and four words for the log-partitions: exact for temperature sampling without top-k or
  top-p (it declares ``masks = False`` and refuses masked rows).
* :func:`candidates` sends each rank's top C (x, raw logit, id) and the same words; top-k and top-p run on the
  merged candidates.  It is exact where the candidates hold every token the masks keep, and falls back to the
  gathered logits where they may not (:data:`FALLBACKS`; a note per row says which): those rows alone are drawn
  from the gathered logits, the others from the candidates.

Everything travels through ``all_gather`` as float64 (ids exact below 2**53, keys as raw bits); each rank reduces
the gathered words itself, in rank order, so no NaN meets a collective's max and every rank decides alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from reference.checks import InvalidInput, check_d2t
from reference.sampling import (
    Noise,
    SamplingParams,
    classic_sample,
    gumbel_noise,
    has_probabilities,
    masses,
    scaled,
    top_p_mask,
)
from reference.topk import order_keys
from sharded.group import TPGroup
from sharded.keys import decode_ids, encode_keys
from sharded.layout import ShardLayout, every_rank
from sharded.local_argmax import checked_shard_logits, token_logits

FAR_ID = 2**32 - 1  # a missing candidate's id: above every target, so it loses every tie
FALLBACKS = (  # when the candidates may miss a kept token: the row falls back to the gathered logits
    "fallback: top-k above the candidates C",
    "fallback: a rank's C-th candidate ties the k-th value (it may hold more tied tokens)",
    "fallback: top-p without top-k, and the candidates above the unsent tokens carry less than p of the mass",
    "fallback: no top-k or top-p mask, every token can win",
    "fallback: a NaN or +inf without top-k, every token is kept",
)


def shard_tokens(hidden, weight, bias, layout: ShardLayout, scale, soft_cap, d2t, sampling: SamplingParams):
    """This rank's shard logits (padding included), its token logits ``[B, n]`` and their target ids ``[n]``."""
    sampling.check(hidden.shape[0])
    logits = checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap)
    values, ids = token_logits(logits, layout)
    targets = ids if d2t is None else check_d2t(d2t, layout.vocab)[ids]
    return logits, values, targets


def _nan_to_zero(t: torch.Tensor) -> torch.Tensor:
    return t.masked_fill(t.isnan(), 0.0)


def words(values: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """float64 ``[B, 4]``: this rank's (max, sum of ``exp(t - max)``) of the raw logits and of ``x``; the max is NaN
    where the rank holds a NaN or ``+inf`` (no probabilities), ``-inf`` where it holds no finite logit."""
    parts = []
    for t in (values.double(), x.double()):
        if not t.shape[1]:
            parts += [t.new_full(t.shape[:1], -math.inf), t.new_zeros(t.shape[0])]
            continue
        top = t.masked_fill(t.isnan(), math.inf).amax(dim=1)
        shift = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
        parts += [torch.where(top == math.inf, math.nan, top), (t - shift.unsqueeze(1)).exp().sum(dim=1)]
    return torch.stack(parts, dim=1)


def log_partition(m: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """float64 ``[B]`` from gathered ``[tp, B]`` maxima and sums: ``M + log(sum_r s_r exp(m_r - M))``; NaN where a
    rank saw a NaN or ``+inf``, or every logit is ``-inf`` (what ``log_softmax`` gives those rows)."""
    top = m.masked_fill(m.isnan(), 0.0).amax(dim=0)
    shift = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    total = _nan_to_zero(s * (m - shift).exp()).sum(dim=0)
    bad = m.isnan().any(dim=0) | (top == -math.inf)
    return torch.where(bad, math.nan, shift + total.log())


def gathered_logits(logits, layout: ShardLayout, group: TPGroup, d2t) -> tuple[torch.Tensor, int | None]:
    """Every rank's shard gathered into the draft logits ``[B, L]`` by global id, and the target vocabulary the
    table reaches (the largest target + 1; None without ``d2t``): the classic path's row, on every rank.  Uneven
    shards travel padded to the widest rank's columns (a collective takes one shape)."""
    every = every_rank(layout)
    wide = max(lay.size for lay in every)
    gathered = group.all_gather(F.pad(logits, (0, wide - logits.shape[1])))  # [tp, B, wide]
    draft = logits.new_empty(logits.shape[0], layout.vocab)
    for lay in every:
        draft[:, lay.token_ids(logits.device)] = gathered[lay.rank][:, lay.token_rows(logits.device)]
    return draft, None if d2t is None else int(check_d2t(d2t, layout.vocab).max()) + 1


def classic_answer(draft, sampling: SamplingParams, d2t, target_vocab, noise=gumbel_noise):
    """The classic sampler (reference.sampling) over gathered draft logits, as a sampler answers: tokens, float32
    log-probs, kept ids (-1: none)."""
    sample = classic_sample(draft, sampling, d2t, target_vocab, noise)
    kept = torch.where(sample.kept, torch.arange(sample.kept.shape[1], device=draft.device), -1)
    return sample.tokens, sample.log_probs.float(), kept


def gathered_sample(logits, layout: ShardLayout, group: TPGroup, d2t, sampling: SamplingParams, noise=gumbel_noise):
    """The fallback: gather every logit and run the classic sampler over them, on every rank."""
    draft, target_vocab = gathered_logits(logits, layout, group, d2t)
    return classic_answer(draft, sampling, d2t, target_vocab, noise)


def sampler(body: Callable[..., Any], name: str, doc: str | None) -> Callable[..., Any]:
    """A subject of the sampling contract named ``name``: ``body(hidden, weight, bias, layout, sampling, scale,
    soft_cap, d2t, group)`` behind the contract's signature, the one every sampler has (``sharded.impls`` reads it)."""

    def impl(
        hidden: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        layout: ShardLayout,
        *,
        sampling: SamplingParams,
        scale: float = 1.0,
        soft_cap: float | None = None,
        d2t: torch.Tensor | None = None,
        group: TPGroup,
    ):
        return body(hidden, weight, bias, layout, sampling, scale, soft_cap, d2t, group)

    impl.__name__ = impl.__qualname__ = name
    impl.__doc__ = doc
    return impl


def gumbel_pairs_with(noise: Noise, name: str = "gumbel_pairs"):
    """:func:`gumbel_pairs` drawing ``noise`` (over global target ids) instead of the contract's, declared as
    ``fn.noise`` so that the oracle draws the same: for samplers whose engine has its own noise."""

    impl = sampler(lambda *args: _pairs(*args, noise), name, _pairs.__doc__)
    impl.noise, impl.masks = noise, False  # temperature only: the properties draw no top-k or top-p for it
    return impl


def _pairs(hidden, weight, bias, layout: ShardLayout, sampling: SamplingParams, scale, soft_cap, d2t, group, noise):
    """Each rank adds the noise of its own target ids and offers its first maximum: 7 float64 words per row and rank
    (the packed key, the chosen token's raw logit and ``x``, and the four log-partition words).  Temperature only:
    a row with top-k or top-p is refused."""
    _, values, targets = shard_tokens(hidden, weight, bias, layout, scale, soft_cap, d2t, sampling)
    masked = ((sampling.top_k > 0) & (sampling.top_k < layout.vocab)) | (sampling.top_p < 1)
    if bool((masked & ~sampling.greedy).any()):
        raise InvalidInput("gumbel_pairs samples without top-k or top-p (sampling top_k 0 and top_p 1 on every row)")
    x = scaled(values, sampling)
    greedy = sampling.greedy.to(x.device).unsqueeze(1)
    score = torch.where(greedy, x, x + noise(sampling.seed.to(x.device), targets).to(x.device))
    batch = x.shape[0]
    if targets.numel():
        keys = encode_keys(score, targets.expand_as(score))
        best, at = keys.max(dim=1)
        chosen = [values.float().gather(1, at.unsqueeze(1)).squeeze(1), x.gather(1, at.unsqueeze(1)).squeeze(1)]
    else:  # a rank without tokens offers -inf at an id above all
        best = encode_keys(x.new_full((batch,), -math.inf), torch.full((batch,), FAR_ID, device=x.device))
        chosen = [x.new_zeros(batch), x.new_zeros(batch)]
    mine = torch.cat([best.view(torch.float64).unsqueeze(1), torch.stack(chosen, 1).double(), words(values, x)], 1)
    gathered = group.all_gather(mine)  # [tp, B, 7]
    keys = gathered[..., 0].contiguous().view(torch.int64)
    winner = keys.argmax(dim=0)
    tokens = decode_ids(keys.amax(dim=0))
    at_winner = gathered.gather(0, winner.view(1, -1, 1).expand(1, batch, 7)).squeeze(0)
    raw = at_winner[:, 1] - log_partition(gathered[..., 3], gathered[..., 4])
    processed = at_winner[:, 2] - log_partition(gathered[..., 5], gathered[..., 6])
    log_probs = torch.stack([raw, torch.where(greedy.squeeze(1), raw, processed)], dim=1).float()
    return tokens, log_probs, None, ()


gumbel_pairs = gumbel_pairs_with(gumbel_noise)


def _same(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Equal in the argmax order: ``-0.0 == +0.0``, NaN equals NaN."""
    return (a == b) | (a.isnan() & b.isnan())


def candidates(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    layout: ShardLayout,
    *,
    sampling: SamplingParams,
    scale: float = 1.0,
    soft_cap: float | None = None,
    d2t: torch.Tensor | None = None,
    group: TPGroup,
):
    """Each rank's top C (x, raw logit, target id) and its four log-partition words, ``B * (3C + 5)`` float64 words
    per rank; top-k, top-p and the draw run on the merged candidates, or on the gathered logits (:data:`FALLBACKS`)."""
    logits, values, targets = shard_tokens(hidden, weight, bias, layout, scale, soft_cap, d2t, sampling)
    c = sampling.candidates
    x = scaled(values, sampling)
    batch, n = x.shape
    take = min(c, n)
    index = encode_keys(x, targets.expand_as(x)).topk(take, dim=1).indices if take else x.new_zeros(batch, 0).long()
    cols = [x.gather(1, index).double(), values.float().gather(1, index).double(), targets[index].double()]
    fill = (-math.inf, -math.inf, -1.0)  # a missing candidate: id -1
    cols = [torch.cat([col, col.new_full((batch, c - take), f)], dim=1) for col, f in zip(cols, fill, strict=True)]
    complete = torch.full((batch, 1), float(n <= c), dtype=torch.float64, device=x.device)
    mine = torch.cat([torch.stack(cols, dim=2).reshape(batch, 3 * c), words(values, x), complete], dim=1)
    gathered = group.all_gather(mine)  # [tp, B, 3C + 5]
    tp = gathered.shape[0]
    cand = gathered[..., : 3 * c].reshape(tp, batch, c, 3).permute(1, 0, 2, 3)  # [B, tp, C, 3]
    w = gathered[..., 3 * c :]
    tokens, log_probs, kept_ids, reasons = merge(cand, w, sampling, layout.vocab)
    notes = tuple(FALLBACKS[r - 1] if r else "" for r in reasons.tolist())
    if any(notes):  # every rank decides alike (the merged words are the same everywhere), so all gather together
        back = [row for row, note in enumerate(notes) if note]  # only these rows' logits
        rows = torch.tensor(back, device=logits.device)
        back_tokens, back_log_probs, back_kept = gathered_sample(logits[rows], layout, group, d2t, sampling.rows(back))
        tokens, log_probs = tokens.index_copy(0, rows, back_tokens), log_probs.index_copy(0, rows, back_log_probs)
        width = max(kept_ids.shape[1], back_kept.shape[1])
        kept_ids, back_kept = (F.pad(k, (0, width - k.shape[1]), value=-1) for k in (kept_ids, back_kept))
        kept_ids = kept_ids.index_copy(0, rows, back_kept)
    return tokens, log_probs, kept_ids, notes


candidates.masks = True
candidates.draws_from_candidates = True


def merge(cand: torch.Tensor, w: torch.Tensor, sampling: SamplingParams, vocab: int):
    """Every row's draw from its merged candidates ``[B, tp, C, 3]`` and the ranks' words ``[tp, B, 5]``: tokens,
    float32 log-probs, kept ids, and per row 0 (exact) or 1 + the index of its reason in :data:`FALLBACKS`."""
    batch, tp, c, _ = cand.shape
    flat = cand.reshape(batch, tp * c, 3)
    valid = flat[..., 2] >= 0
    xs = flat[..., 0].float().masked_fill(~valid, -math.inf)
    ids = flat[..., 2].long().masked_fill(~valid, FAR_ID)
    order = encode_keys(xs, ids).argsort(dim=1, descending=True)  # NaN, then larger x, then smaller id
    xs, raws, ids, valid = (t.gather(1, order) for t in (xs, flat[..., 1], ids, valid))
    last = cand[:, :, -1, 0].float()  # each rank's C-th candidate
    open_ranks = (w[..., 4] == 0).T  # [B, tp]: ranks holding more tokens than they sent
    greedy, k = sampling.greedy.to(xs.device), sampling.top_k.to(xs.device)
    p = sampling.top_p.to(xs.device).double()
    k_on, p_on, sampled = (k > 0) & (k < vocab), p < 1, ~greedy
    keys = order_keys(xs)
    at_k = (k.clamp(1, c) - 1).unsqueeze(1)
    tied = (open_ranks & _same(last, xs.gather(1, at_k))).any(dim=1)
    kept = valid & torch.where(k_on.unsqueeze(1), keys >= keys.gather(1, at_k), True)
    probabilities = has_probabilities(xs, kept)
    everywhere = probabilities & ~w[..., 2].isnan().any(dim=0)  # no NaN or +inf on any rank either
    e = masses(xs, kept)
    top = xs.double().masked_fill(~kept, -math.inf).amax(dim=1)
    from_words = _nan_to_zero(w[..., 3] * (w[..., 2] - top).exp()).sum(dim=0)  # every token's mass
    total = torch.where(k_on, e.sum(dim=1), from_words)
    threshold = torch.where(open_ranks, last.double(), -math.inf).amax(dim=1)
    covered = (e * (xs.double() > threshold.unsqueeze(1))).sum(dim=1) >= p * total
    holds = sampled & torch.stack(  # in the order of FALLBACKS
        [
            k_on & (k > c),
            k_on & (k <= c) & tied,
            ~k_on & p_on & everywhere & open_ranks.any(dim=1) & ~covered,
            ~k_on & ~p_on,
            ~k_on & p_on & ~everywhere,
        ]
    )
    reasons = torch.where(holds.any(dim=0), holds.int().argmax(dim=0) + 1, 0)  # the first reason that holds
    kept = top_p_mask(xs, kept, sampling.top_p, total.unsqueeze(1))
    kept = torch.where(greedy.unsqueeze(1), valid, kept)
    noise = gumbel_noise(sampling.seed.to(xs.device), ids)
    score = torch.where(greedy.unsqueeze(1), xs, xs + noise).masked_fill(~kept, -math.inf)
    best = encode_keys(score, ids).argmax(dim=1, keepdim=True)
    tokens = ids.gather(1, best).squeeze(1)
    raw = raws.gather(1, best).squeeze(1) - log_partition(w[..., 0], w[..., 1])
    processed = torch.log_softmax(xs.double().masked_fill(~kept, -math.inf), dim=1).gather(1, best).squeeze(1)
    log_probs = torch.stack([raw, torch.where(greedy, raw, processed)], dim=1).float()
    chosen = torch.zeros_like(kept).scatter_(1, best, True)
    kept_ids = torch.where(torch.where(greedy.unsqueeze(1), chosen, kept), ids, -1)
    return tokens, log_probs, kept_ids, reasons


def classic_sampling(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    layout: ShardLayout,
    *,
    sampling: SamplingParams,
    scale: float = 1.0,
    soft_cap: float | None = None,
    d2t: torch.Tensor | None = None,
    group: TPGroup,
):
    """The built-ins' own classic path, as a sampler: gather every logit and run the classic sampler on every rank
    (their fallback, and the path ``fn.classic_path`` names for the equal-paths property)."""
    logits, _, _ = shard_tokens(hidden, weight, bias, layout, scale, soft_cap, d2t, sampling)
    tokens, log_probs, kept = gathered_sample(logits, layout, group, d2t, sampling)
    return tokens, log_probs, kept, ("",) * tokens.shape[0]


gumbel_pairs.classic_path = candidates.classic_path = "classic_sampling"
SAMPLING_BUILTINS = {"gumbel_pairs": gumbel_pairs, "candidates": candidates, "classic_sampling": classic_sampling}
DEFAULT_SAMPLING_IMPLS = ("gumbel_pairs", "candidates")
