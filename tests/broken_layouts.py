"""Deliberately broken implementations of the layouts beyond one even split (properties/test_layouts.py), each the
correct local path with one real bug of spec section 13's classes; tests/test_power.py shows each caught for its rule.
"""

from __future__ import annotations

import torch

from reference.logits import head_logits
from sharded.dp_rows import gather_rows, own_rows
from sharded.layout import every_rank
from sharded.local_argmax import checked_shard_logits, local_best, map_d2t, pick_pairs, vllm_pairs
from tests.broken import _map_any


def _whole_head(weight, bias, layout, group):
    """Every rank's shard gathered (padded to the widest) into the whole head's token rows, by global id: a
    module replicated on every rank."""
    every = every_rank(layout)
    wide = max(lay.size for lay in every)
    pad = (0, 0, 0, wide - weight.shape[0])
    shards = group.all_gather(torch.nn.functional.pad(weight, pad))
    biases = None if bias is None else group.all_gather(torch.nn.functional.pad(bias, pad[2:]))
    order = sorted(
        (int(i), lay.rank, int(r)) for lay in every for i, r in zip(lay.token_ids(), lay.token_rows(), strict=True)
    )
    rows = torch.stack([shards[rank, row] for _, rank, row in order])
    return rows, None if biases is None else torch.stack([biases[rank, row] for _, rank, row in order])


def _mapped(ids, d2t, layout):
    """Through d2t where an id is a draft id; any other id as it is (so that a model of the bug can name it)."""
    return ids if d2t is None else _map_any(ids, d2t, layout)


def own_copy_argmax(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    """A replicated module: each rank takes the argmax of the whole head on its own copy of the hidden states, with
    no broadcast (sgl-project/sglang #40246's DFlash greedy proposals, #31071's verify)."""
    checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap)
    rows, biases = _whole_head(weight, bias, layout, group)
    return map_d2t(head_logits(hidden, rows, biases, scale, soft_cap).argmax(dim=-1), d2t, layout)


def rank0_inputs_broadcast(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    """The ranks agree by taking rank 0's copy of the hidden states: each rank's shard logits come from it, not
    from the rank's own copy (a broadcast before the head)."""
    rank0 = group.all_gather(hidden)[0]
    return vllm_pairs(rank0, weight, bias, layout, scale=scale, soft_cap=soft_cap, d2t=d2t, group=group)


def segment_trimmed(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group, dp_rows=None):
    """Attention data parallel without the rows' gather: each rank reduces its own rows' shard logits, padded to
    the most rows, so row i meets the other ranks' row i (NVIDIA/TensorRT-LLM #16440: trimmed before the
    reduction, each rank picked from its own shard)."""
    if dp_rows is None:  # every rank holds every row: nothing to trim
        return vllm_pairs(hidden, weight, bias, layout, scale=scale, soft_cap=soft_cap, d2t=d2t, group=group)
    values, ids = local_best(checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap), layout)
    most = max(dp_rows)
    pad = (0, most - hidden.shape[0])
    values = torch.nn.functional.pad(values.float(), pad, value=float("-inf"))
    tokens = pick_pairs(values, torch.nn.functional.pad(ids, pad, value=layout.start), group)
    return map_d2t(tokens[: hidden.shape[0]], d2t, layout)


def first_rows_kept(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group, dp_rows=None):
    """Gathers every rank's rows and reduces them right, then keeps the batch's first rows, not the rank's own."""
    if dp_rows is None:
        return vllm_pairs(hidden, weight, bias, layout, scale=scale, soft_cap=soft_cap, d2t=d2t, group=group)
    every = gather_rows(hidden, dp_rows, group)
    tokens = vllm_pairs(every, weight, bias, layout, scale=scale, soft_cap=soft_cap, d2t=d2t, group=group)
    return tokens[: dp_rows[group.rank]]


def rows_mixed_with_ranks(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group, dp_rows=None):
    """The gathered ``[tp, rows, 2]`` pairs reshaped to ``[rows, tp, 2]`` instead of transposed (NVIDIA/TensorRT-LLM
    #7128, #7571), under attention data parallel: each row meets pairs of other rows."""
    every = hidden if dp_rows is None else gather_rows(hidden, dp_rows, group)
    values, ids = local_best(checked_shard_logits(every, weight, bias, layout, scale, soft_cap), layout)
    pairs = group.all_gather(torch.stack([values.float(), ids.float()], dim=-1))  # [tp, rows, 2]
    mixed = pairs.reshape(values.shape[0], -1, 2)
    winner = mixed[..., 0].argmax(dim=1, keepdim=True)
    tokens = _mapped(mixed[..., 1].gather(1, winner).squeeze(1).long(), d2t, layout)
    return tokens if dp_rows is None else own_rows(tokens, dp_rows, group.rank)


def offset_from_own_width(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    """Ids numbered ``local + rank * width`` with the rank's own width (NVIDIA/TensorRT-LLM #18836's review: on
    shards [501, 500], rank 1's first id is 501, not 500)."""
    values, ids = local_best(checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap), layout)
    base = ids < layout.org_vocab  # added ids keep their own numbering; on even shards ``start`` is rank x width
    offset = layout.rank * layout.added_row  # the rank's own base columns
    return _mapped(pick_pairs(values, torch.where(base, ids - layout.start + offset, ids), group), d2t, layout)


def widest_width_assumed(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    """Base ids numbered as if every rank held the widest rank's base columns, as a gather that assumes equal widths
    reads them (rank r's column j taken for id ``r * widest + j``; nkipy #52, tt-mlir #8623's class); added ids keep
    their own numbering, and on even shards every rank is the widest, so only uneven shards show it."""
    values, ids = local_best(checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap), layout)
    widest = max(lay.added_row for lay in every_rank(layout))  # a rank's base columns
    base = ids < layout.org_vocab
    return _mapped(
        pick_pairs(values, torch.where(base, ids - layout.start + layout.rank * widest, ids), group), d2t, layout
    )


def indices_summed(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    """The winner's id found by summing, not selecting (openxla/tt-mlir #8623's lowering): every rank holding the
    row's maximum adds its id, so a tie across ranks returns the sum of their ids."""
    values, ids = local_best(checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap), layout)
    top = group.all_reduce(values.float(), op="max")
    mine = torch.where(values.float() == top, ids, torch.zeros_like(ids))
    return _mapped(group.all_reduce(mine, op="sum"), d2t, layout)
