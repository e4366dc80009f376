"""Vocab-parallel top-k: each rank's top k, one all-gather of (value, id) pairs, and a merge of the tp*k candidates.

The order is the argmax rule extended to k (:mod:`sharded.keys`): NaN first, then larger values, equal
values (``-0.0 == +0.0``) by the smaller global id.  Ranks hold distinct ids, so every key is distinct:
``topk`` on the keys has no ties to settle and its sorted result is unique.

Ids travel as float32 in the pairs, exact only below 2**24: callers check the padded vocabulary with
``reference.checks.check_float_ids`` on every rank before the collective.  Values travel bit-exact:
float32 as is, and bfloat16 / float16 as their 16-bit patterns (integers, exact in float32), because
torch's float32 -> bfloat16 / float16 casts rewrite NaNs (the sign bit or payload is lost, differently
on contiguous and strided tensors).
"""

from __future__ import annotations

import torch

from reference.checks import InvalidInput, check_float_ids
from reference.topk import check_k
from sharded.group import TPGroup
from sharded.keys import encode_keys
from sharded.layout import ShardLayout
from sharded.local_argmax import checked_shard_logits, map_d2t, token_logits

SENTINEL_ID = -1  # fills a rank's missing slots when it has fewer than k tokens; below every real candidate
_BELOW_ALL = torch.iinfo(torch.int64).min  # an encoded key is at least -2**63 + 2**32, so this is below each


def local_top_k(values: torch.Tensor, gids: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's top k of ``values [B, n]`` (its token columns, global ids ``gids [n]``): values and ids ``[B, k]``.

    A rank with fewer than k tokens (none included) fills the rest with value ``-inf`` and id
    :data:`SENTINEL_ID`, so every rank joins the collective with the same shapes.
    """
    batch, n = values.shape
    take = min(k, n)
    idx = encode_keys(values, gids).topk(take, dim=1).indices
    top_values, top_ids = values.gather(1, idx), gids.to(torch.int64)[idx]
    if take < k:
        top_values = torch.cat([top_values, values.new_full((batch, k - take), -torch.inf)], dim=1)
        top_ids = torch.cat([top_ids, top_ids.new_full((batch, k - take), SENTINEL_ID)], dim=1)
    return top_values, top_ids


def _to_wire(values: torch.Tensor) -> torch.Tensor:
    """float32 that carries every bit: float32 as is, 16-bit dtypes as their bit patterns."""
    return values.float() if values.dtype == torch.float32 else values.view(torch.int16).float()


def _from_wire(wire: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return wire if dtype == torch.float32 else wire.to(torch.int16).view(dtype)


def merge_pairs(values: torch.Tensor, ids: torch.Tensor, k: int, group: TPGroup) -> tuple[torch.Tensor, torch.Tensor]:
    """The group's top k from each rank's ``local_top_k``: one ``all_gather`` of ``[B, k, 2]`` float32 pairs.

    Returns values ``[B, k]`` in the input dtype (bit-exact) and int64 ids, the same on every rank.
    Raises ``InvalidInput`` (a ``ValueError``) if a sentinel would be chosen: the ranks hold fewer than k tokens in all.
    """
    pairs = group.all_gather(torch.stack([_to_wire(values), ids.float()], dim=-1))  # [tp, B, k, 2]
    batch = values.shape[0]
    candidates = pairs.permute(1, 0, 2, 3).reshape(batch, -1, 2)  # [B, tp*k, 2]
    cand_values = _from_wire(candidates[..., 0], values.dtype)
    cand_ids = candidates[..., 1].long()
    sentinel = cand_ids < 0
    keys = encode_keys(cand_values, cand_ids.clamp(min=0)).masked_fill_(sentinel, _BELOW_ALL)
    best = keys.topk(k, dim=1).indices
    if bool(sentinel.gather(1, best).any()):
        raise InvalidInput(f"k={k} exceeds the {int((~sentinel).sum(1).min())} tokens the ranks hold")
    return cand_values.gather(1, best), cand_ids.gather(1, best)


def topk_pairs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    layout: ShardLayout,
    *,
    k: int,
    scale: float = 1.0,
    soft_cap: float | None = None,
    d2t: torch.Tensor | None = None,
    group: TPGroup,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The built-in local top-k: per-rank top k over the tokens, ``B*2*k*tp`` float32 values exchanged, one merge."""
    check_k(k, layout.vocab)
    check_float_ids(layout.padded_vocab)
    logits = checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap)
    values, ids = merge_pairs(*local_top_k(*token_logits(logits, layout), k), k, group)
    return map_d2t(ids, d2t, layout), values


TOPK_BUILTINS = {"topk_pairs": topk_pairs}
DEFAULT_TOPK_IMPLS = ("topk_pairs",)
