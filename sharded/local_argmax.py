"""The built-in local-argmax implementations and the pieces they are made of.

Every implementation follows the rank-local contract in docs/contract.md: called on
each rank with that rank's inputs and group, it returns the same int64 target
ids ``[B]`` on every rank.
"""

from __future__ import annotations

import torch

from reference.checks import check_d2t, check_float_ids, check_head, check_scale
from reference.logits import head_logits
from sharded.dp_rows import through_every_row
from sharded.group import TPGroup
from sharded.keys import decode_ids, encode_keys
from sharded.layout import ShardLayout, every_rank


def checked_shard_logits(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    layout: ShardLayout,
    scale: float,
    soft_cap: float | None,
) -> torch.Tensor:
    """Validate this rank's inputs and compute its ``[B, shard_rows]`` logits."""
    check_scale(scale, soft_cap)
    check_head(hidden, weight, bias)
    if weight.shape[0] != layout.size:
        raise ValueError(
            f"rank {layout.rank}: weight shard has {weight.shape[0]} rows but the layout gives "
            f"{layout.size} ({layout.num_real + layout.num_added} tokens + {layout.num_padding} other rows)"
        )
    return head_logits(hidden, weight, bias, scale, soft_cap)


def token_values(logits: torch.Tensor, layout: ShardLayout) -> torch.Tensor:
    """``[B, n]`` logits of this rank's token rows: base, then added (a view while the tokens are one block)."""
    return logits[:, : layout.num_real] if not layout.num_added else logits[:, layout.token_rows(logits.device)]


def token_logits(logits: torch.Tensor, layout: ShardLayout) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`token_values` and their ascending global ids ``[n]``."""
    return token_values(logits, layout), layout.token_ids(logits.device)


def local_best(logits: torch.Tensor, layout: ShardLayout) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's first maximum over this rank's tokens only (padding never competes), and its global id.

    A rank without tokens offers ``-inf`` at its first id, which loses every tie to rank 0 (id 0 is always
    a token there).
    """
    values = token_values(logits, layout)
    if not values.shape[-1]:
        values = logits.new_full(logits.shape[:1], float("-inf"))
        return values, torch.full_like(values, layout.start, dtype=torch.int64)
    best, index = values.max(dim=-1)
    return best, layout.id_at(index)


def map_d2t(ids: torch.Tensor, d2t: torch.Tensor | None, layout: ShardLayout) -> torch.Tensor:
    """Draft ids to target ids: ``id + d2t[id]`` (identity without a table)."""
    if d2t is None:
        return ids
    targets = check_d2t(d2t, layout.vocab)
    return targets[ids]


def pick_pairs(values: torch.Tensor, ids: torch.Tensor, group: TPGroup) -> torch.Tensor:
    """vLLM's exchange: all-gather ``[value, id]`` as float32 pairs, take the maximal value, the smallest id on ties.

    Not the lowest rank: with added ids, a lower rank can hold a larger id (vLLM takes the lowest rank).
    """
    pairs = torch.stack([values.float(), ids.float()], dim=-1)  # [B, 2]
    gathered = group.all_gather(pairs)  # [tp, B, 2]
    keys = encode_keys(gathered[..., 0], gathered[..., 1].long())  # the argmax order: NaN first, -0 == +0
    return gathered[..., 1].gather(0, keys.argmax(dim=0).unsqueeze(0)).squeeze(0).long()


def reduce_pairs(logits: torch.Tensor, layout: ShardLayout, group: TPGroup) -> torch.Tensor:
    """vLLM's ``LocalArgmaxMixin``: (float32 value, float32 id) pairs through ``all_gather``."""
    check_float_ids(layout.padded_vocab)
    return pick_pairs(*local_best(logits, layout), group)


def reduce_keys(logits: torch.Tensor, layout: ShardLayout, group: TPGroup) -> torch.Tensor:
    """One int64 key per row and one ``all_reduce(MAX)``: O(B) bytes, independent of tp."""
    return decode_ids(group.all_reduce(encode_keys(*local_best(logits, layout)), op="max"))


def reduce_gather(logits: torch.Tensor, layout: ShardLayout, group: TPGroup) -> torch.Tensor:
    """The classic path: all-gather every logit, O(B * V_padded) bytes, order the tokens by global id, argmax.

    Uneven shards travel padded to the widest rank's columns (a collective takes one shape)."""
    every = every_rank(layout)
    wide = max(lay.size for lay in every)
    gathered = group.all_gather(torch.nn.functional.pad(logits, (0, wide - logits.shape[1])))  # [tp, B, wide]
    base = [gathered[lay.rank][:, : lay.num_real] for lay in every]  # base ids come before added ids
    added = [gathered[lay.rank][:, lay.added_row : lay.added_row + lay.num_added] for lay in every]
    return torch.cat(base + added, dim=1).argmax(dim=-1)


REDUCTIONS = {"vllm_pairs": reduce_pairs, "packed_key": reduce_keys, "classic_gather": reduce_gather}


def _implementation(name: str):
    reduce = REDUCTIONS[name]

    def impl(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group, dp_rows=None):
        if dp_rows is not None:  # attention data parallel: every rank's rows through the head, each keeps its own
            return through_every_row(
                impl, hidden, dp_rows, group, weight, bias, layout, scale=scale, soft_cap=soft_cap, d2t=d2t
            )
        logits = checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap)
        return map_d2t(reduce(logits, layout, group), d2t, layout)

    impl.__name__ = impl.__qualname__ = name
    impl.__doc__ = reduce.__doc__
    return impl


# classic_gather maps the full-row argmax through d2t like the local paths (the contract carries
# no target vocabulary to scatter into), so it shares their answer on all -inf rows.
BUILTINS = {name: _implementation(name) for name in REDUCTIONS}
vllm_pairs, packed_key, classic_gather = (BUILTINS[n] for n in ("vllm_pairs", "packed_key", "classic_gather"))
DEFAULT_IMPLS = ("packed_key", "vllm_pairs")  # the local paths: what the suite tests unless told otherwise
