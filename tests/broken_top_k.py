"""Deliberately broken top-k implementations (the contract adds ``k`` and returns ``(ids, values)``): the suite
must catch every one (tests/test_power.py).

Like tests/broken.py, each is the correct local top-k with one bug, written from the built-in's pieces.
"""

from __future__ import annotations

from collections import Counter

import torch

from sharded.keys import encode_keys
from sharded.local_argmax import checked_shard_logits, map_d2t, token_logits
from sharded.local_top_k import local_top_k, merge_pairs, topk_pairs
from tests.broken import _by_position, _map_any


def _topk_candidates(hidden, weight, bias, layout, k, scale, soft_cap):
    logits = checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap)
    return logits, local_top_k(*token_logits(logits, layout), k)


def topk_merge_by_rank(hidden, weight, bias, layout, *, k, scale=1.0, soft_cap=None, d2t=None, group):
    """Merges by value alone, stable in reverse rank order: ties go to the higher rank, not the smaller id."""
    _, (values, ids) = _topk_candidates(hidden, weight, bias, layout, k, scale, soft_cap)
    gathered = group.all_gather(torch.stack([values.float(), ids.float()], dim=-1)).flip(0)  # [tp, B, k, 2]
    cand = gathered.permute(1, 0, 2, 3).reshape(values.shape[0], -1, 2)
    keys = encode_keys(cand[..., 0], torch.zeros_like(cand[..., 1], dtype=torch.int64))
    keys = keys.masked_fill(cand[..., 1] < 0, torch.iinfo(torch.int64).min)
    order = keys.sort(dim=1, descending=True, stable=True).indices[:, :k]
    return map_d2t(cand[..., 1].gather(1, order).long(), d2t, layout), cand[..., 0].gather(1, order).to(values.dtype)


def topk_ties_by_target_id(hidden, weight, bias, layout, *, k, scale=1.0, soft_cap=None, d2t=None, group):
    """Maps each rank's candidates through d2t before the merge, so equal values come in ascending target id:
    the classic order, but a rank's own top k were still chosen by draft id, and its top-1 is not the argmax's."""
    _, (values, ids) = _topk_candidates(hidden, weight, bias, layout, k, scale, soft_cap)
    if d2t is not None:
        ids = torch.where(ids >= 0, map_d2t(ids.clamp(min=0), d2t, layout), ids)
    values, top = merge_pairs(values, ids, k, group)
    return top, values


def topk_padding_fills_short_rank(hidden, weight, bias, layout, *, k, scale=1.0, soft_cap=None, d2t=None, group):
    """A rank with fewer than k tokens fills its slots with the rows that follow, padding included."""
    logits = checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap)
    rows, ids = layout.token_rows(logits.device), layout.token_ids(logits.device)
    if rows.numel() < k:
        spare = [r for r in range(layout.size) if r not in set(rows.tolist())][: k - rows.numel()]
        spare = torch.tensor(spare, dtype=torch.int64, device=logits.device)
        rows, ids = torch.cat([rows, spare]), torch.cat([ids, _by_position(layout, spare)])
    values, top = merge_pairs(*local_top_k(logits[:, rows], ids, k), k, group)
    return _map_any(top, d2t, layout) if d2t is not None else top, values


def topk_scale_applied_twice(hidden, weight, bias, layout, *, k, scale=1.0, soft_cap=None, d2t=None, group):
    """Selects right, but scales the returned values again (values are computed apart from the ids)."""
    ids, values = topk_pairs(hidden, weight, bias, layout, k=k, scale=scale, soft_cap=soft_cap, d2t=d2t, group=group)
    return ids, values * scale if scale != 1.0 else values


def topk_ids_int32(hidden, weight, bias, layout, *, k, scale=1.0, soft_cap=None, d2t=None, group):
    ids, values = topk_pairs(hidden, weight, bias, layout, k=k, scale=scale, soft_cap=soft_cap, d2t=d2t, group=group)
    return ids.int(), values


def topk_two_gathers(hidden, weight, bias, layout, *, k, scale=1.0, soft_cap=None, d2t=None, group):
    """Right answer, but values and ids travel in two all-gathers (vLLM's way): one collective is the design."""
    _, (values, ids) = _topk_candidates(hidden, weight, bias, layout, k, scale, soft_cap)
    group.all_gather(ids)  # the second collective; the merge below uses the pairs
    values, top = merge_pairs(values, ids, k, group)
    return map_d2t(top, d2t, layout), values


_topk_calls: Counter[int] = Counter()  # calls per rank


def topk_alternating(hidden, weight, bias, layout, *, k, scale=1.0, soft_cap=None, d2t=None, group):
    """Every other call on a rank merges ties toward the higher rank."""
    _topk_calls[group.rank] += 1
    impl = topk_merge_by_rank if _topk_calls[group.rank] % 2 else topk_pairs
    return impl(hidden, weight, bias, layout, k=k, scale=scale, soft_cap=soft_cap, d2t=d2t, group=group)


def topk_k_clamped(hidden, weight, bias, layout, *, k, scale=1.0, soft_cap=None, d2t=None, group):
    """Silently returns fewer ids when k exceeds the logits vocabulary."""
    k = min(k, layout.vocab)
    return topk_pairs(hidden, weight, bias, layout, k=k, scale=scale, soft_cap=soft_cap, d2t=d2t, group=group)


def _top_k_log_probs(hidden, weight, bias, layout, *, k, scale, soft_cap, d2t, group, scaled: bool):
    """The top k with log-probabilities as values: the log-partition over every rank's tokens, from the logits
    after soft cap and scale (``scaled``) or before them."""
    ids, values = topk_pairs(hidden, weight, bias, layout, k=k, scale=scale, soft_cap=soft_cap, d2t=d2t, group=group)
    logits = checked_shard_logits(hidden, weight, bias, layout, scale if scaled else 1.0, soft_cap if scaled else None)
    partition = torch.logsumexp(group.all_gather(torch.logsumexp(token_logits(logits, layout)[0].float(), -1)), 0)
    return ids, values.float() - partition.unsqueeze(-1)


def topk_log_probs_unscaled_partition(hidden, weight, bias, layout, *, k, scale=1.0, soft_cap=None, d2t=None, group):
    """Log-probabilities whose partition skips the soft cap and scale that the selected values went through."""
    return _top_k_log_probs(
        hidden, weight, bias, layout, k=k, scale=scale, soft_cap=soft_cap, d2t=d2t, group=group, scaled=False
    )


topk_log_probs_unscaled_partition.values = "log_probs"
