"""A third-party local argmax for attention data parallel beside a vocab-parallel head, written only against
docs/contract.md: each rank holds its own requests' rows (``dp_rows``), every rank's rows go through every
rank's shard, and each rank keeps its own rows' tokens.  It takes every layout of the contract: added ids, uneven
shards, ranks whose copies of the hidden states differ."""

import torch
import torch.nn.functional as F


def _check(hidden, weight, bias, scale, soft_cap):
    if not scale > 0 or (soft_cap is not None and not soft_cap > 0):
        raise ValueError(f"scale and soft_cap must be > 0, got scale={scale}, soft_cap={soft_cap}")
    if weight.dtype != hidden.dtype or (bias is not None and bias.dtype != weight.dtype):
        raise ValueError("dtype mismatch between hidden, weight and bias")
    if weight.shape[1] != hidden.shape[1]:
        raise ValueError(f"shape mismatch: hidden {tuple(hidden.shape)}, weight {tuple(weight.shape)}")
    if bias is not None and bias.shape != weight.shape[:1]:
        raise ValueError(f"bias must have one entry per weight row, got {tuple(bias.shape)}")


def _better(value, gid, best_value, best_id):
    """Where (value, gid) beats the best so far: NaN first, then the larger value, then the smaller id."""
    nan, best_nan = value.isnan(), best_value.isnan()
    tie = (value == best_value) | (nan & best_nan)
    return (nan & ~best_nan) | (value > best_value) | (tie & (gid < best_id))


def local_argmax(hidden, weight, bias, layout, *, scale, soft_cap, d2t, group, dp_rows=None):
    _check(hidden, weight, bias, scale, soft_cap)
    mine = hidden.shape[0]
    if dp_rows is not None:  # every rank's rows, in rank order, through this rank's shard
        if len(dp_rows) != group.world_size or dp_rows[group.rank] != mine:
            raise ValueError(f"dp_rows {dp_rows} does not give rank {group.rank} its {mine} rows")
        padded = hidden.new_zeros(max(dp_rows), hidden.shape[1])
        padded[:mine] = hidden
        gathered = group.all_gather(padded)
        hidden = torch.cat([gathered[r, :n] for r, n in enumerate(dp_rows)])
    logits = F.linear(hidden, weight, bias)
    if soft_cap is not None:
        logits = torch.tanh(logits / soft_cap) * soft_cap
    if scale != 1.0:
        logits = logits * scale
    rows, ids = layout.token_rows(), layout.token_ids()
    if len(rows):
        value, index = logits[:, rows].max(dim=-1)  # the first maximum; NaN counts as the maximum
        gid = ids[index]
    else:  # no tokens here: a pair that loses to every rank's
        value = logits.new_full(logits.shape[:1], float("-inf"))
        gid = torch.full_like(value, 2**62, dtype=torch.int64)
    pairs = group.all_gather(torch.stack([value.double(), gid.double()], dim=-1))  # exact for every dtype and id
    best_value, best_id = pairs[0, :, 0], pairs[0, :, 1]
    for r in range(1, pairs.shape[0]):
        take = _better(pairs[r, :, 0], pairs[r, :, 1], best_value, best_id)
        best_value, best_id = torch.where(take, pairs[r, :, 0], best_value), torch.where(take, pairs[r, :, 1], best_id)
    top = best_id.long()
    if d2t is not None:
        targets = torch.arange(len(d2t)) + d2t
        if bool((targets < 0).any()) or targets.unique().numel() != len(targets):
            raise ValueError("d2t must map draft ids to distinct, non-negative targets")
        top = targets[top]
    if dp_rows is None:
        return top
    start = sum(dp_rows[: group.rank])
    return top[start : start + mine]
