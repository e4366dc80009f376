"""Deliberately broken samplers: each has one bug the sampling properties must catch, and name.

They are written from the bug's description, not from the suite's fault models: a small sharded sampler that
exchanges every rank's (x, noise, target id) rows (or each rank's top C of them) and applies the masks to what it
received, with one thing done wrong; or the built-ins' classic path run with one parameter done wrong (a k one too
large, one k for the batch), where the bug is in what the sampler is asked, not in how it draws.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from functools import partial

import torch

from reference.oracle import tokens_from_draft_logits
from reference.sampling import (
    SamplingParams,
    gumbel_noise,
    has_probabilities,
    kept_mask,
    log_probs,
    masses,
    scaled,
    support_mask,
    target_logits,
    top_k_mask,
    top_p_margin,
    top_p_mask,
)
from reference.topk import top_k_ids
from sharded.group import TPGroup
from sharded.keys import encode_keys
from sharded.layout import ShardLayout, every_rank
from sharded.local_argmax import checked_shard_logits, token_logits
from sharded.local_sampling import classic_answer, gathered_logits, gumbel_pairs_with, shard_tokens


def from_rank_0(group: TPGroup, answer, batch: int, width: int, device) -> tuple[torch.Tensor, ...]:
    """``answer()``'s (tokens ``[B]``, log-probs ``[B, 2]``, kept ids ``[B, width]``), computed on rank 0 alone and
    handed to every rank by one all_gather of float64 words (ids below 2**53 and float32 values travel exactly):
    what every rank would compute alike from the words it gathered is computed once (a broken sampler's traffic is
    nobody's measure; the built-ins draw on every rank)."""
    words = torch.zeros(batch, 3 + width, dtype=torch.float64, device=device)
    if group.rank == 0:
        tokens, log_probs, kept = answer()
        words = torch.cat([tokens.unsqueeze(1).double(), log_probs.float().double(), kept.double()], dim=1)
    words = group.all_gather(words)[0]
    return words[:, 0].long(), words[:, 1:3].float(), words[:, 3:].long()


def _classic_once(group: TPGroup, draft, sampling: SamplingParams, d2t, target_vocab, noise=gumbel_noise):
    """The classic sampler over the gathered draft logits, as the built-ins' classic path draws, on rank 0 alone."""
    width = draft.shape[1] if target_vocab is None else target_vocab
    answer = partial(classic_answer, draft, sampling, d2t, target_vocab, noise)
    return from_rank_0(group, answer, draft.shape[0], width, draft.device)


def _sample(
    hidden,
    weight,
    bias,
    layout: ShardLayout,
    *,
    sampling: SamplingParams,
    scale=1.0,
    soft_cap=None,
    d2t=None,
    group,
    key: str = "target",
    temperature_after: bool = False,
    noise_first: bool = False,
    greedy_sampled: bool = False,
    exact_k: bool = False,
    per_rank: int | None = None,
    shard_log_prob: bool = False,
    ignore_top_p: bool = False,
    rank_order: bool = False,
    nan_loses: bool = False,
    largest_first: bool = False,
    greedy_below: float = 0.0,
    x_in_dtype: bool = False,
    top_p_rule: str = "<",
    report_before_top_p: bool = False,
    x_in_float64: bool = False,
    raw_log_prob_at_draft_id: bool = False,
    processed_is_raw: bool = False,
):
    """Gather each rank's token rows (or its top ``per_rank``), then mask, add noise and take the first maximum: every
    row at once, as :func:`reference.sampling.classic_sample` does (a loop over rows cost most of a power test's time
    on the batches of 500), the bug-specific steps aside."""
    logits = checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap)
    values, ids = token_logits(logits, layout)
    targets = ids if d2t is None else ids + d2t[ids]
    temperature = sampling.temperature
    if greedy_sampled:
        temperature = torch.where(temperature == 0, 1.0, temperature)
    if greedy_below:  # an engine's greedy threshold: tiny temperatures taken as 0
        temperature = torch.where(temperature < greedy_below, 0.0, temperature)
    greedy = temperature == 0
    t = torch.where(greedy, 1.0, temperature).unsqueeze(1)
    x = (values / t.to(values.dtype)).float() if x_in_dtype else values.float() / t
    if x_in_float64:  # never overflows: at a subnormal T every x stays finite and the largest logit wins
        x = values.double() / t.double()
    keyed = {"target": targets, "draft": ids, "column": layout.token_rows()}[key]
    g = gumbel_noise(sampling.seed, keyed)
    owner_lse = torch.logsumexp(values.double(), dim=1)
    if per_rank is not None and ids.numel() > per_rank:
        top = encode_keys(x, targets.expand_as(x)).topk(per_rank, dim=1).indices  # by x, ties by target id
        x, g, values = x.gather(1, top), g.gather(1, top), values.gather(1, top)
        cols = targets[top]
    else:
        cols = targets.expand(x.shape[0], -1)
    width = layout.size if per_rank is None else min(layout.size, per_rank)  # what the widest rank sends
    pad = width - x.shape[1]
    rows = torch.stack(
        [
            torch.nn.functional.pad(x.double(), (0, pad), value=-math.inf),
            torch.nn.functional.pad(g.double(), (0, pad), value=0.0),
            torch.nn.functional.pad(values.double(), (0, pad), value=-math.inf),
            torch.nn.functional.pad(cols.double(), (0, pad), value=-1.0),
        ]
    )
    every = group.all_gather(rows)  # [tp, 4, B, width]
    lse = group.all_gather(owner_lse)  # [tp, B]
    batch, columns = x.shape[0], every.shape[0] * every.shape[3]

    def answer():  # what every rank would compute alike from the gathered words
        xs, gs, raws, tid = (every[:, i].permute(1, 0, 2).reshape(x.shape[0], -1) for i in range(4))
        walk = _walk(tid, rank_order, largest_first)
        xs = xs if x_in_float64 else xs.float()
        v, n, r, ids = xs.gather(1, walk), gs.gather(1, walk).float(), raws.gather(1, walk), tid.gather(1, walk)
        chosen_on = v + n if noise_first else v
        sampled = ~greedy
        by_k = _on_rows(top_k_mask, sampled & (sampling.top_k > 0), chosen_on, sampling.top_k)  # the rest keep all
        if exact_k:  # the first k by value, ties by position: the rest dropped
            for row in sampled.nonzero().flatten().tolist():
                if 0 < (k := int(sampling.top_k[row])) < v.shape[1]:
                    top = top_k_ids(chosen_on[row : row + 1], k)[0]
                    by_k[row] = torch.zeros_like(by_k[row]).index_fill_(0, top, True)
        p = torch.ones_like(sampling.top_p) if ignore_top_p else torch.where(sampled, sampling.top_p, 1.0)  # 1: off
        kept = _nucleus(chosen_on, by_k, p, top_p_rule)
        score = (r.float() + n) / t if temperature_after else v + n
        score = torch.where(greedy.unsqueeze(1), v, score)
        if nan_loses:  # a max that compares with ``>``: a NaN never beats anything
            score = score.masked_fill(score.isnan(), -math.inf)
        best = score.masked_fill(~kept, -math.inf).argmax(dim=1, keepdim=True)
        token = ids.gather(1, best)
        raw_lp = r.gather(1, best)[:, 0] - torch.logsumexp(lse, dim=0)  # every rank's tokens, the unsent candidates too
        if shard_log_prob:  # normalised by the owner rank's own log-sum-exp
            owner = (every[:, 3] == token).any(dim=2).int().argmax(dim=0)
            raw_lp = r.gather(1, best)[:, 0] - lse[owner, torch.arange(lse.shape[1])]
        if raw_log_prob_at_draft_id and d2t is not None:  # the draft id's logit, as if d2t were not applied
            targets_of = torch.arange(d2t.numel(), device=token.device) + d2t.to(token.device)  # by draft id
            draft = (targets_of.unsqueeze(0) == token.long()).long().argmax(dim=1, keepdim=True)
            at = (ids == draft.double()).long().argmax(dim=1, keepdim=True)  # the column of target id `draft`
            raw_lp = r.gather(1, at)[:, 0] - torch.logsumexp(lse, dim=0)
        reported = by_k if report_before_top_p else kept  # top-k's set, not the nucleus
        processed = torch.log_softmax(v.double().masked_fill(~reported, -math.inf), dim=1).gather(1, best)[:, 0]
        log_probs = torch.stack([raw_lp, raw_lp if processed_is_raw else torch.where(greedy, raw_lp, processed)], 1)
        mine = torch.where(greedy.unsqueeze(1), torch.zeros_like(reported).scatter_(1, best, True), reported)
        slot = torch.where(mine, mine.cumsum(dim=1) - 1, xs.shape[1])  # ids in walk order; the rest to a spare
        kept_ids = torch.full((xs.shape[0], xs.shape[1] + 1), -1, dtype=torch.int64).scatter_(1, slot, ids.long())
        return token[:, 0].long(), log_probs, kept_ids[:, :-1]

    return (*from_rank_0(group, answer, batch, columns, x.device), ())


def _on_rows(
    mask: Callable[..., torch.Tensor],
    rows: torch.Tensor,
    x: torch.Tensor,
    *args: torch.Tensor,
    keep: torch.Tensor | None = None,
) -> torch.Tensor:
    """``mask(x, *args)`` (a row-by-row mask of reference.sampling) computed on ``rows`` only; the other rows keep
    ``keep`` (all True if None).  A mask that is off on most rows then sorts only the rows it is on."""
    out = torch.ones_like(x, dtype=torch.bool) if keep is None else keep.clone()
    if bool(rows.any()):
        out[rows] = mask(x[rows], *(a[rows] for a in args))
    return out


def _walk(tid: torch.Tensor, rank_order: bool, largest_first: bool) -> torch.Tensor:
    """int64 ``[B, n]``: each row's gathered columns that hold a token (target id ``>= 0``; every row has as many), in
    the order the row is walked: by target id, as the classic row is; rank by rank as gathered (a tie goes to the
    lower rank); or by target id descending (a tie goes to the largest id).  Rows that gathered the same ids (all of
    them, unless each rank sent each row's own top candidates) share one walk: one sort, not one per row."""
    shared = bool((tid == tid[:1]).all())
    rows = tid[:1] if shared else tid
    valid = rows >= 0
    if rank_order:
        order = torch.arange(rows.shape[1]).expand_as(rows)
    elif largest_first:
        order = rows.masked_fill(~valid, -1).argsort(dim=1, descending=True)
    else:
        order = rows.masked_fill(~valid, 2**40).argsort(dim=1)
    walk = order[valid.gather(1, order)].view(rows.shape[0], -1)  # a rank sends as many columns for every row
    return walk.expand(tid.shape[0], -1) if shared else walk


def _step_seeds(seeds: torch.Tensor) -> torch.Tensor:
    """One key for the whole batch, as an engine draws one per step: every row's seed from all of them, and its
    row."""
    return seeds.sum() * 7919 + torch.arange(seeds.shape[0], device=seeds.device)  # int64 arithmetic wraps


def step_noise(seeds: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """The noise of :func:`_step_seeds`: a function of the whole batch's seeds, the row and the id."""
    return gumbel_noise(_step_seeds(seeds), ids)


def _nucleus(v: torch.Tensor, kept: torch.Tensor, p: torch.Tensor, rule: str) -> torch.Tensor:
    """Top-p over each row's ``kept`` (``[B, n]``, ``v`` ordered by target id, ``p`` ``[B]``, 1: off): ``"<"`` the
    contract's; ``"<="`` keeps a token whose mass above is exactly ``p`` of the kept mass; ``"split"`` walks the
    tokens one by one, largest first and equal values in id order, keeping each while the mass before it is below
    ``p``, so a tie group can be cut in two."""
    if rule == "<":
        return _on_rows(top_p_mask, p < 1, v, kept, p, keep=kept)
    return torch.stack([_row_nucleus(v[row], kept[row], p[row : row + 1], rule) for row in range(v.shape[0])])


def _row_nucleus(v: torch.Tensor, kept: torch.Tensor, p: torch.Tensor, rule: str) -> torch.Tensor:
    """:func:`_nucleus` of one row, for the rules other than the contract's."""
    if float(p) >= 1 or not bool(has_probabilities(v[None], kept[None])[0]):  # no masses: top-p keeps top-k's set
        return kept
    margin, total = top_p_margin(v[None], kept[None], p)
    if rule == "<=":
        return kept & (margin[0] <= 0)
    e = (v.double() - v.double()[kept].max()).exp().masked_fill(~kept, 0.0)
    order = v.masked_fill(~kept, -math.inf).sort(descending=True, stable=True).indices
    before = e[order].cumsum(0) - e[order]
    keep = torch.zeros_like(kept)
    keep[order] = before < float(p) * float(total)
    return kept & keep


def _broken(name: str, doc: str, **fault):
    def impl(hidden, weight, bias, layout, *, sampling, scale=1.0, soft_cap=None, d2t=None, group):
        given = {"sampling": sampling, "scale": scale, "soft_cap": soft_cap, "d2t": d2t, "group": group}
        return _sample(hidden, weight, bias, layout, **given, **fault)

    impl.__name__ = impl.__qualname__ = name
    impl.__doc__ = doc
    return impl


gathered_sampler = _broken("gathered_sampler", "No bug: the broken samplers' common body, for the meta-tests.")
noise_by_column = _broken("noise_by_column", "Keys each token's noise by its row in the shard.", key="column")
noise_by_draft_id = _broken("noise_by_draft_id", "Keys the noise by draft id, before d2t.", key="draft")
temperature_after_noise = _broken("temperature_after_noise", "(logit + noise) / T.", temperature_after=True)
noise_before_masks = _broken("noise_before_masks", "Top-k and top-p choose on noised logits.", noise_first=True)
greedy_rows_sampled = _broken("greedy_rows_sampled", "Samples temperature-0 rows at T = 1.", greedy_sampled=True)
top_k_drops_ties = _broken("top_k_drops_ties", "Keeps exactly k tokens: ties at the k-th value dropped.", exact_k=True)
top_p_ignored = _broken("top_p_ignored", "Never applies top-p.", ignore_top_p=True)
ties_by_rank = _broken("ties_by_rank", "Takes the first maximum in rank order, not by id.", rank_order=True)
ties_to_largest_id = _broken("ties_to_largest_id", "Takes the last maximum by id.", largest_first=True)
nan_never_wins = _broken("nan_never_wins", "Its maximum compares with >: a NaN never wins.", nan_loses=True)
greedy_below_1e_5 = _broken("greedy_below_1e_5", "Takes temperatures below 1e-5 as greedy.", greedy_below=1e-5)
greedy_below_1e_2 = _broken("greedy_below_1e_2", "Takes temperatures below 1e-2 as greedy.", greedy_below=1e-2)
x_in_head_dtype = _broken("x_in_head_dtype", "Divides by T in the head's dtype, then widens.", x_in_dtype=True)
top_p_at_or_below = _broken("top_p_at_or_below", "Top-p keeps while the mass above is <= p.", top_p_rule="<=")
top_p_splits_ties = _broken("top_p_splits_ties", "Top-p token by token: a tie group is cut.", top_p_rule="split")
kept_before_top_p = _broken(
    "kept_before_top_p",
    "Reports the kept set and the processed log-probability after top-k, before top-p; draws right.",
    report_before_top_p=True,
)
x_in_float64 = _broken("x_in_float64", "Divides by T in float64: logit / T never overflows.", x_in_float64=True)
raw_log_prob_at_draft_id = _broken(
    "raw_log_prob_at_draft_id", "The raw log-probability read at the draft id.", raw_log_prob_at_draft_id=True
)
processed_is_raw = _broken("processed_is_raw", "Reports the raw log-probability as processed.", processed_is_raw=True)
log_prob_per_shard = _broken(
    "log_prob_per_shard", "The raw log-probability normalised by the owner rank's log-sum-exp.", shard_log_prob=True
)


def _gathered_with(name: str, doc: str, change):
    """The built-ins' classic path on the gathered logits, run with the parameters ``change(sampling)`` gives: one
    mask or noise key done wrong, the rest exact (and fast: the draw is vectorised)."""

    def impl(hidden, weight, bias, layout, *, sampling, scale=1.0, soft_cap=None, d2t=None, group):
        changed = change(sampling)
        logits, _, _ = shard_tokens(hidden, weight, bias, layout, scale, soft_cap, d2t, changed)
        draft, target_vocab = gathered_logits(logits, layout, group, d2t)
        return (*_classic_once(group, draft, changed, d2t, target_vocab), ("",) * draft.shape[0])

    impl.__name__ = impl.__qualname__ = name
    impl.__doc__ = doc
    return impl


def _one_past(s: SamplingParams) -> SamplingParams:
    return replace(s, top_k=torch.where(s.top_k > 0, s.top_k + 1, s.top_k))


def _batch_k(s: SamplingParams) -> SamplingParams:
    on = s.top_k > 0
    return replace(s, top_k=torch.full_like(s.top_k, int(s.top_k[on].min()))) if bool(on.any()) else s


def _raised_p(s: SamplingParams) -> SamplingParams:
    return replace(s, top_p=torch.where(s.top_p < 1, (s.top_p + 0.125).clamp(max=1.0), s.top_p))


def _first_temperature(s: SamplingParams) -> SamplingParams:
    sampled = s.temperature > 0
    first = s.temperature[sampled][:1]
    return replace(s, temperature=torch.where(sampled, first, s.temperature)) if first.numel() else s


def _temperature_one(s: SamplingParams) -> SamplingParams:
    return replace(s, temperature=torch.where(s.temperature > 0, 1.0, 0.0))


def _stepped(change):
    return lambda s: replace(change(s), seed=_step_seeds(s.seed))


top_k_one_past = _gathered_with("top_k_one_past", "Top-k keeps one token past the k-th value (k + 1).", _one_past)
top_p_raised = _gathered_with("top_p_raised", "Top-p with p raised by 1/8: the nucleus too wide.", _raised_p)
first_temperature = _gathered_with(
    "first_temperature", "Every sampled row at the batch's first sampled row's temperature.", _first_temperature
)
temperature_one = _gathered_with("temperature_one", "Every sampled row at temperature 1.", _temperature_one)
top_k_of_the_batch = _gathered_with(
    "top_k_of_the_batch",
    "One top-k for the batch, its smallest, and one noise key per step (declared): a row follows its batchmates.",
    _stepped(_batch_k),
)
top_k_of_the_batch.noise, top_k_of_the_batch.noise_key = step_noise, "step"
top_k_of_the_batch_per_row = _gathered_with(
    "top_k_of_the_batch_per_row", "One top-k for the batch, its smallest; the contract's noise.", _batch_k
)
top_k_one_past_beside_its_classic_path = _gathered_with(
    "top_k_one_past_beside_its_classic_path",
    "top_k_one_past, naming the built-ins' classic path as its own: the two paths draw differently.",
    _stepped(_one_past),
)
top_k_one_past_beside_its_classic_path.noise_key = "step"
top_k_one_past_beside_its_classic_path.noise = step_noise
top_k_one_past_beside_its_classic_path.classic_path = "classic_sampling"


def _position_keys(x: torch.Tensor, layout: ShardLayout, d2t) -> torch.Tensor:
    """int64 ``[B, V]``: each target's candidate position, its rank's index times the rank's rows plus its place
    among the rank's targets by ``x`` descending (ties by target id): what a sampler over gathered candidates keys
    its noise by."""
    keys = torch.zeros(x.shape, dtype=torch.int64)
    for lay in every_rank(layout):
        mine = lay.token_ids()
        mine = (mine if d2t is None else mine + d2t[mine]).sort().values
        place = x[:, mine].sort(dim=1, descending=True, stable=True).indices
        keys.scatter_(1, mine[place], lay.rank * lay.size + torch.arange(mine.numel()).expand_as(place))
    return keys


def _by_position(hidden, weight, bias, layout, *, sampling, scale=1.0, soft_cap=None, d2t=None, group):
    logits, _, _ = shard_tokens(hidden, weight, bias, layout, scale, soft_cap, d2t, sampling)
    draft, target_vocab = gathered_logits(logits, layout, group, d2t)

    def noise(seeds: torch.Tensor, _ids: torch.Tensor) -> torch.Tensor:
        x = scaled(target_logits(draft, d2t, target_vocab)[0], sampling)
        return gumbel_noise(seeds, _position_keys(x, layout, d2t))

    return (*_classic_once(group, draft, sampling, d2t, target_vocab, noise), ())


def _keyed_by_position(name: str, doc: str):
    def impl(hidden, weight, bias, layout, *, sampling, scale=1.0, soft_cap=None, d2t=None, group):
        return _by_position(hidden, weight, bias, layout, sampling=sampling, scale=scale, soft_cap=soft_cap,
                            d2t=d2t, group=group)  # fmt: skip

    impl.__name__ = impl.__qualname__ = name
    impl.__doc__ = doc
    return impl


noise_by_candidate_position = _keyed_by_position(
    "noise_by_candidate_position",
    "Keys the noise by candidate position (rank, then place by x), as a sampler over gathered candidates does, and "
    "declares the contract's.",
)
# Not broken: the same noise declared as such (fn.noise_key), the named divergence (token-exactness cannot hold).
declared_candidate_position = _keyed_by_position(
    "declared_candidate_position", "noise_by_candidate_position, declared."
)
declared_candidate_position.noise_key = "candidate position"


def _candidates_where(name: str, doc: str, which):
    """A sampler whose rows ``which(sampling, vocab)`` are drawn from each rank's top C candidates alone, every other
    row from every token."""

    def impl(hidden, weight, bias, layout, *, sampling, scale=1.0, soft_cap=None, d2t=None, group):
        given = {"sampling": sampling, "scale": scale, "soft_cap": soft_cap, "d2t": d2t, "group": group}
        full = _sample(hidden, weight, bias, layout, **given)
        alone = _sample(hidden, weight, bias, layout, **given, per_rank=sampling.candidates)
        rows = which(sampling, layout.vocab)
        width = max(full[2].shape[1], alone[2].shape[1])
        kept = [torch.nn.functional.pad(k, (0, width - k.shape[1]), value=-1) for k in (full[2], alone[2])]
        pick = rows.unsqueeze(1)
        return (
            torch.where(rows, alone[0], full[0]),
            torch.where(pick, alone[1], full[1]),
            torch.where(pick, *kept[::-1]),
            (),
        )

    impl.__name__ = impl.__qualname__ = name
    impl.__doc__ = doc
    impl.draws_from_candidates = True
    return impl


no_fallback_k_above_c = _candidates_where(
    "no_fallback_k_above_c",
    "Takes top-k from each rank's top C candidates even when k > C.",
    lambda s, vocab: (s.top_k > s.candidates) & (s.top_k < vocab),
)
no_fallback_tied_at_c = _candidates_where(
    "no_fallback_tied_at_c",
    "Takes top-k from each rank's top C candidates, even where a rank's C-th candidate ties the k-th value.",
    lambda s, vocab: (s.top_k > 0) & (s.top_k <= s.candidates) & (s.top_k < vocab),
)
top_p_over_candidates = _candidates_where(
    "top_p_over_candidates",
    "Top-p without top-k over each rank's top C candidates, normalised over them only.",
    lambda s, vocab: ((s.top_k == 0) | (s.top_k >= vocab)) & (s.top_p < 1),
)


def _every_16(seeds: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Noise that repeats every 16 ids: tokens 16 apart always draw the same."""
    return gumbel_noise(seeds, ids % 16)


# Declares its noise honestly (the oracle draws the same), so only the distribution property can see the bug.
noise_repeats_every_16_ids = gumbel_pairs_with(_every_16, "noise_repeats_every_16_ids")


def _multinomial(
    name: str,
    doc: str,
    mask: Callable[[torch.Tensor, SamplingParams], torch.Tensor],
    reports_kept: bool = True,
    greedy_below: float = 0.0,
):
    """A sampler with its own randomness: ``torch.multinomial`` over the gathered row's softmax on ``mask``'s kept
    set, from one ``torch.Generator`` per step (seeded by the batch's seeds), so no token noise can declare it.  A
    row without probabilities (a NaN, a ``+inf``, all ``-inf``) takes the one token its support holds, a greedy row
    its argmax (and so a row whose temperature lies below ``greedy_below``); it reports the log-probabilities at its
    token, and the kept set where ``reports_kept``."""

    def impl(hidden, weight, bias, layout, *, sampling, scale=1.0, soft_cap=None, d2t=None, group):
        logits, _, _ = shard_tokens(hidden, weight, bias, layout, scale, soft_cap, d2t, sampling)
        t = sampling.temperature
        sampling = replace(sampling, temperature=t.masked_fill(t < greedy_below, 0.0))
        draft, target_vocab = gathered_logits(logits, layout, group, d2t)

        def answer():
            full, mapped = target_logits(draft, d2t, target_vocab)
            x, greedy = scaled(full, sampling), sampling.greedy
            kept = mask(x, sampling) & mapped
            fair = has_probabilities(x, kept) & ~greedy
            generator = torch.Generator(device=draft.device).manual_seed(int(sampling.seed.sum()) % 2**62)
            weights = torch.where(fair.unsqueeze(1), masses(x, kept), 1.0).float()
            drawn = torch.multinomial(weights, 1, generator=generator)[:, 0]
            only = support_mask(x, kept).int().argmax(dim=1)  # the one token a row without probabilities draws
            argmax = tokens_from_draft_logits(draft, d2t, target_vocab)
            tokens = torch.where(greedy, argmax, torch.where(fair, drawn, only))
            ids = torch.arange(x.shape[1], device=x.device)
            kept = torch.where(greedy.unsqueeze(1), ids == tokens.unsqueeze(1), kept)
            return tokens, log_probs(full, x, kept, tokens, greedy).float(), torch.where(kept, ids, -1)

        width = draft.shape[1] if target_vocab is None else target_vocab
        tokens, log_probs_, kept = from_rank_0(group, answer, draft.shape[0], width, draft.device)
        return tokens, log_probs_, kept if reports_kept else None, ()

    impl.__name__ = impl.__qualname__ = name
    impl.__doc__ = doc
    impl.noise_key = "torch.multinomial per step"
    return impl


multinomial_over_kept = _multinomial(
    "multinomial_over_kept", "No bug: torch.multinomial over the classic kept set (its own randomness).", kept_mask
)
multinomial_top_p_skipped = _multinomial(
    "multinomial_top_p_skipped",
    "torch.multinomial over top-k's set: top-p never applied (its own randomness).",
    lambda x, s: top_k_mask(x, s.top_k),
)
multinomial_top_p_skipped_unreported = _multinomial(
    "multinomial_top_p_skipped_unreported",
    "torch.multinomial over top-k's set: top-p never applied (its own randomness); no kept set reported, so only "
    "its draws show the mask it skips.",
    lambda x, s: top_k_mask(x, s.top_k),
    reports_kept=False,
)
multinomial_greedy_below_1e_2 = _multinomial(
    "multinomial_greedy_below_1e_2",
    "torch.multinomial over the classic kept set, but a temperature below 1e-2 taken as greedy (its own randomness).",
    kept_mask,
    greedy_below=1e-2,
)


def _top_p_at_t1(x: torch.Tensor, s: SamplingParams) -> torch.Tensor:
    """Top-k on ``x``, top-p on the logits (``x`` times T): the nucleus at temperature 1."""
    t = torch.where(s.greedy, 1.0, s.temperature).to(x.device).unsqueeze(1)
    by_k = top_k_mask(x, s.top_k)
    return top_p_mask(x * t, by_k, s.top_p)


multinomial_top_p_at_t1_unreported = _multinomial(
    "multinomial_top_p_at_t1_unreported",
    "torch.multinomial at T, but top-p's nucleus taken over the logits (at T = 1) (its own randomness, no kept set "
    "reported): below T = 1 it keeps more than the nucleus of x, within top-k's set, so top-p skipped holds every "
    "draw but draws them with other odds.",
    _top_p_at_t1,
    reports_kept=False,
)
multinomial_top_k_skipped = _multinomial(
    "multinomial_top_k_skipped",
    "torch.multinomial over top-p's nucleus of every token: top-k never applied (its own randomness).",
    lambda x, s: top_p_mask(x, torch.ones_like(x, dtype=torch.bool), s.top_p),
)
