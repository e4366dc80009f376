"""The built-in local-argmax implementations and the pieces they are made of.

Every implementation follows the rank-local contract in README.md: called on
each rank with that rank's inputs and group, it returns the same int64 target
ids ``[B]`` on every rank.
"""

from __future__ import annotations

import torch

from reference.checks import check_d2t, check_float_ids, check_head, check_scale
from reference.logits import head_logits
from sharded.group import TPGroup
from sharded.keys import decode_ids, encode_keys
from sharded.layout import ShardLayout


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
            f"{layout.size} ({layout.num_real} real + {layout.num_padding} padding)"
        )
    return head_logits(hidden, weight, bias, scale, soft_cap)


def local_best(logits: torch.Tensor, layout: ShardLayout) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's first maximum over the real columns only (padding never competes), and its global id.

    A rank of padding only offers ``-inf`` at its first id, which loses every tie to a lower rank.
    """
    if layout.num_real == 0:
        values = logits.new_full(logits.shape[:1], float("-inf"))
        return values, torch.full_like(values, layout.start, dtype=torch.int64)
    values, index = logits[:, : layout.num_real].max(dim=-1)
    return values, index + layout.start


def map_d2t(ids: torch.Tensor, d2t: torch.Tensor | None, layout: ShardLayout) -> torch.Tensor:
    """Draft ids to target ids: ``id + d2t[id]`` (identity without a table)."""
    if d2t is None:
        return ids
    targets = check_d2t(d2t, layout.vocab)
    return targets[ids]


def pick_pairs(values: torch.Tensor, ids: torch.Tensor, group: TPGroup) -> torch.Tensor:
    """vLLM's exchange: all-gather ``[value, id]`` as float32 pairs, take the first maximal value."""
    pairs = torch.stack([values.float(), ids.float()], dim=-1)  # [B, 2]
    gathered = group.all_gather(pairs)  # [tp, B, 2]
    winner = gathered[..., 0].argmax(dim=0)  # first (lowest) rank on ties; NaN wins
    return gathered[..., 1].gather(0, winner.unsqueeze(0)).squeeze(0).long()


def reduce_pairs(logits: torch.Tensor, layout: ShardLayout, group: TPGroup) -> torch.Tensor:
    """vLLM's ``LocalArgmaxMixin``: (float32 value, float32 id) pairs through ``all_gather``."""
    check_float_ids(layout.padded_vocab)
    return pick_pairs(*local_best(logits, layout), group)


def reduce_keys(logits: torch.Tensor, layout: ShardLayout, group: TPGroup) -> torch.Tensor:
    """One int64 key per row and one ``all_reduce(MAX)``: O(B) bytes, independent of tp."""
    return decode_ids(group.all_reduce(encode_keys(*local_best(logits, layout)), op="max"))


def reduce_gather(logits: torch.Tensor, layout: ShardLayout, group: TPGroup) -> torch.Tensor:
    """The classic path: all-gather every logit, O(B * V_padded) bytes, then one argmax."""
    gathered = group.all_gather(logits)  # [tp, B, shard]
    return gathered.permute(1, 0, 2).reshape(logits.shape[0], -1)[:, : layout.vocab].argmax(dim=-1)


REDUCTIONS = {"vllm_pairs": reduce_pairs, "packed_key": reduce_keys, "classic_gather": reduce_gather}


def _implementation(name: str):
    reduce = REDUCTIONS[name]

    def impl(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group) -> torch.Tensor:
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
