"""Corrections of SGLang 0.5.23's greedy DFlash and Domino picks (SGLang's page, causes S2 to S4): the project's own
code in place of the wheel's per-rank pair and cross-rank select, run through the same properties as the row beside
the original (``tpargmax report --page sglang``).

* S2: a rank whose shard holds no base ids offers ``-inf`` at its first id, where the wheel's ``torch.max`` over no
  columns raises (the graph sampler, Domino's pick) or offers the dtype's lowest finite value (the eager sampler).
* S3: the eager sampler's select over ranks takes the largest value and, among equal values, the smallest id (NaN
  first), not the lowest rank: a lower rank's added id is larger than a higher rank's base id.
* S4 (the eager sampler's padding id on an all ``-inf`` row) is S2's ``finfo.min``: the same correction removes it.
The eager sampler's added maximum also replaces the base maximum when it is NaN (the wheel's ``added_max > local_max``
never holds for a NaN).  Each subject keeps its original's head, hidden-state handling and layouts
(:mod:`engines.sglang.subjects.dflash_draft`).
"""

from __future__ import annotations

import torch

from engines.sglang.subjects import dflash_draft as subjects
from sharded.group import TPGroup
from sharded.keys import decode_ids, encode_keys
from sharded.layout import ShardLayout
from sharded.local_argmax import checked_shard_logits


def base_pair(base_logits: torch.Tensor, start: int) -> tuple[torch.Tensor, torch.Tensor]:
    """S2: each row's first maximum over the rank's base columns and its global id; ``-inf`` at ``start`` where the
    rank has none (a lower rank holds id 0 and wins every tie with it)."""
    if not base_logits.shape[1]:
        values = base_logits.new_full(base_logits.shape[:1], float("-inf"))
        return values, torch.full(values.shape, start, dtype=torch.int64, device=values.device)
    values, index = torch.max(base_logits, dim=-1)
    return values, index + start


def lowest_rank_select(values: torch.Tensor, ids: torch.Tensor, group: TPGroup) -> torch.Tensor:
    """The wheel's select, kept: the gathered ``[tp, n]`` table's first maximum (the lowest rank), its id."""
    best = torch.argmax(group.all_gather(values), dim=0, keepdim=True)
    return torch.gather(group.all_gather(ids), 0, best).squeeze(0)


def smallest_id_select(values: torch.Tensor, ids: torch.Tensor, group: TPGroup) -> torch.Tensor:
    """S3: the largest value over ranks (NaN first), the smallest id among equal values: one ordered key per pair."""
    return decode_ids(group.all_gather(encode_keys(values, ids)).amax(dim=0))


def _base_logits(hidden, weight, bias, layout: ShardLayout) -> torch.Tensor:
    hidden, weight = subjects._with_bias(hidden, weight, bias)
    return hidden @ weight[: layout.num_real].T


def sglang_dflash_draft_graph_corrected(
    hidden, weight, bias, layout: ShardLayout, *, scale=1.0, soft_cap=None, d2t=None, group
):
    """``_DflashDraftSampler`` with S2's correction: its base logits, the guarded pair, its select."""
    subjects._check(hidden, weight, layout, soft_cap, scale, d2t)
    if layout.added_vocab:
        raise ValueError("SGLang's DFlash graph sampler takes no added vocabulary (its builder falls back to eager)")
    return lowest_rank_select(*base_pair(_base_logits(hidden, weight, bias, layout), layout.start), group)


def sglang_domino_first_ids_corrected(
    hidden, weight, bias, layout: ShardLayout, *, scale=1.0, soft_cap=None, d2t=None, group
):
    """``_domino_tp_first_ids`` with S2's correction, on the rank's logits as the original takes them."""
    subjects._check(hidden, weight, layout, soft_cap, scale, d2t)
    if layout.added_vocab:
        raise ValueError("SGLang's Domino pick reads base rows only: no added vocabulary")
    logits = checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap)
    return lowest_rank_select(*base_pair(logits[:, : layout.num_real], layout.start), group)


def sglang_dflash_draft_eager_corrected(
    hidden, weight, bias, layout: ShardLayout, *, scale=1.0, soft_cap=None, d2t=None, group
):
    """``_greedy_sample_from_vocab_parallel_head`` with S2's and S3's corrections (module docstring)."""
    subjects._check(hidden, weight, layout, soft_cap, scale, d2t)
    hidden, weight = subjects._with_bias(hidden, weight, bias)
    values, ids = base_pair(hidden @ weight[: layout.num_real].T, layout.start)
    if layout.num_added:
        added = hidden @ weight[layout.added_row : layout.added_row + layout.num_added].T
        added_max, added_arg = torch.max(added, dim=-1)
        # strictly larger, as the wheel takes it (a base id is smaller than every added id), or a NaN over a number
        use = (added_max > values) | (added_max.isnan() & ~values.isnan())
        values = torch.where(use, added_max, values)
        ids = torch.where(use, added_arg + layout.added_start, ids)
    return smallest_id_select(values, ids, group)


for _fn, _original in (
    (sglang_dflash_draft_graph_corrected, subjects.sglang_dflash_draft_graph),
    (sglang_dflash_draft_eager_corrected, subjects.sglang_dflash_draft_eager),
    (sglang_domino_first_ids_corrected, subjects.sglang_domino_first_ids),
):
    for _attr in ("head", "needs", "packages", "layouts", "layouts_why"):
        setattr(_fn, _attr, getattr(_original, _attr))
