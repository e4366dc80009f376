"""Deliberately broken implementations: the suite must catch every one (tests/test_power.py, tests/test_pool.py).

Each is the correct local path with one bug that real engines have had or could
have, written from the same pieces as the built-ins so that only the bug differs.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter

import torch

from groups.torch_group import TorchGroup
from properties.argmax.faults import tf32_linear
from reference.checks import check_d2t, check_float_ids, check_scale
from reference.logits import head_logits
from sharded.keys import decode_ids, encode_keys
from sharded.local_argmax import (
    checked_shard_logits,
    local_best,
    map_d2t,
    packed_key,
    pick_pairs,
    reduce_pairs,
    token_logits,
    vllm_pairs,
)


def _map_any(ids, d2t, layout):
    """Draft ids through d2t; ids that are not draft ids (padding) pass unmapped."""
    targets = check_d2t(d2t, layout.vocab)
    return torch.where(ids < layout.vocab, targets[ids.clamp(max=layout.vocab - 1)], ids)


def _by_position(layout, rows):
    """The id a rank that numbers each block's rows from its first id gives ``rows``: padding rows included."""
    return torch.where(rows < layout.added_row, rows + layout.start, rows - layout.added_row + layout.added_start)


def _unmasked(rows: str, masked_by_adding: bool = False, higher_rank: bool = False):
    """The local path with some rows that are not tokens competing, numbered by position in their block;
    ``masked_by_adding``: they are masked by adding ``-inf``, which leaves a NaN row NaN; ``higher_rank``: a second
    bug, ties across ranks go to the higher rank (``--baseline``'s test: with the first known, it is still found)."""

    def impl(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
        logits = checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap)
        at = logits.device
        extra = {
            "base padding": torch.arange(layout.base_real, layout.added_row, device=at),
            "added padding": torch.arange(layout.added_row + layout.added_real, layout.size, device=at),
            "ids >= vocab": torch.cat(
                [
                    torch.arange(layout.num_real, layout.base_real, device=at),
                    torch.arange(layout.num_added, layout.added_real, device=at) + layout.added_row,
                ]
            ),
        }[rows]
        if masked_by_adding:
            logits = logits.index_add(1, extra, logits.new_full((logits.shape[0], extra.numel()), -torch.inf))
        cols = torch.cat([layout.token_rows(at), extra]).sort().values
        ids = _by_position(layout, cols)
        if not cols.numel():
            return vllm_pairs(hidden, weight, bias, layout, scale=scale, soft_cap=soft_cap, d2t=d2t, group=group)
        values, index = logits[:, cols].max(dim=-1)
        pick = _highest_rank if higher_rank else pick_pairs
        top = pick(values, ids[index], group)
        return top if d2t is None else _map_any(top, d2t, layout)

    return impl


base_padding_unmasked = _unmasked("base padding")
added_padding_unmasked = _unmasked("added padding")
logits_vocab_ignored = _unmasked("ids >= vocab")
# A thin meeting of the first coverage report: NaN padding and added ids.
added_padding_nan_leaks = _unmasked("added padding", masked_by_adding=True)


def added_ids_by_position(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    """Masks the right rows, but numbers every row from ``start``, added ones included (vLLM's numbering)."""
    values, ids = local_best(checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap), layout)
    position = torch.where(ids >= layout.org_vocab, ids - layout.added_start + layout.added_row + layout.start, ids)
    return map_d2t(pick_pairs(values, position, group), d2t, layout)


def last_index_in_shard(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    values, ids = token_logits(checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap), layout)
    if not ids.numel():
        return vllm_pairs(hidden, weight, bias, layout, scale=scale, soft_cap=soft_cap, d2t=d2t, group=group)
    best, index = values.flip(-1).max(dim=-1)  # first maximum of the reversed shard: the last one
    return map_d2t(pick_pairs(best, ids.flip(0)[index], group), d2t, layout)


def lowest_rank_wins(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    """vLLM's merge: the first maximal value in rank order, which is not the smallest id once added ids exist."""
    values, ids = local_best(checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap), layout)
    gathered = group.all_gather(torch.stack([values.float(), ids.float()], dim=-1))  # [tp, B, 2]
    winner = gathered[..., 0].argmax(dim=0)
    return map_d2t(gathered[..., 1].gather(0, winner.unsqueeze(0)).squeeze(0).long(), d2t, layout)


def highest_rank_wins(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    values, ids = local_best(checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap), layout)
    return map_d2t(_highest_rank(values, ids, group), d2t, layout)


def _highest_rank(values, ids, group):
    """The ranks' (value, id) pairs merged with a tie going to the higher rank."""
    gathered = group.all_gather(torch.stack([values.float(), ids.float()], dim=-1))  # [tp, B, 2]
    winner = gathered.shape[0] - 1 - gathered[..., 0].flip(0).argmax(dim=0)
    return gathered[..., 1].gather(0, winner.unsqueeze(0)).squeeze(0).long()


def _bias_left_off(block: str):
    """The local path with the bias left off one block of rows (``"added"``, ``"base"``) or all of them."""

    def impl(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
        logits = checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap)
        if bias is not None:
            bare = checked_shard_logits(hidden, weight, None, layout, scale, soft_cap)
            rows = {"added": (layout.added_row, layout.size), "base": (0, layout.added_row), "all": (0, layout.size)}
            lo, hi = rows[block]
            logits[:, lo:hi] = bare[:, lo:hi]
        values, ids = local_best(logits, layout)
        return map_d2t(pick_pairs(values, ids, group), d2t, layout)

    return impl


bias_skipped_on_added = _bias_left_off("added")
bias_skipped = _bias_left_off("all")


def ids_in_bf16(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    values, ids = local_best(checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap), layout)
    ids = pick_pairs(values, ids.to(torch.bfloat16).long(), group)  # ids above 256 round
    return map_d2t(ids.clamp(max=layout.vocab - 1), d2t, layout)


def values_in_bf16(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    """The pairs' values carried in bfloat16 (the ids exact): float32 maxima a few ulps apart tie, and the lower id
    wins."""
    values, ids = local_best(checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap), layout)
    narrowed = torch.where(torch.isnan(values), values, values.to(torch.bfloat16).to(values.dtype))
    return map_d2t(pick_pairs(narrowed, ids, group), d2t, layout)


def off_by_one_at_shard_start(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    values, ids = local_best(checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap), layout)
    return map_d2t(pick_pairs(values, ids - int(layout.rank > 0), group), d2t, layout)


def ids_without_rank_offset(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    """Each rank reports its base winner's row in the shard, not its global id (the rank's first id left out)."""
    values, ids = local_best(checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap), layout)
    return map_d2t(pick_pairs(values, torch.where(ids < layout.org_vocab, ids - layout.start, ids), group), d2t, layout)


def d2t_applied_twice(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    """The winner's target goes through d2t again wherever the table reaches it."""
    once = vllm_pairs(hidden, weight, bias, layout, scale=scale, soft_cap=soft_cap, d2t=d2t, group=group)
    return once if d2t is None else torch.where(once < len(d2t), _map_any(once, d2t, layout), once)


def softcap_after_choosing(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    check_scale(scale, soft_cap)
    raw, ids = token_logits(checked_shard_logits(hidden, weight, bias, layout, scale, None), layout)
    if not ids.numel():
        return vllm_pairs(hidden, weight, bias, layout, scale=scale, soft_cap=soft_cap, d2t=d2t, group=group)
    best, index = raw.max(dim=-1)
    capped = best if soft_cap is None else torch.tanh(best / soft_cap) * soft_cap
    return map_d2t(pick_pairs(capped, ids[index], group), d2t, layout)


def _keyed(canonical_zero: bool, canonical_nan: bool):
    def impl(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
        logits = checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap)
        values, ids = token_logits(logits, layout)
        if not ids.numel():
            values, ids = (
                logits.new_full((logits.shape[0], 1), float("-inf")),
                torch.tensor([layout.start], device=logits.device),
            )
        keys = encode_keys(values, ids.expand_as(values), canonical_zero=canonical_zero, canonical_nan=canonical_nan)
        best = group.all_reduce(keys.max(dim=-1).values, op="max")  # local and global choice by key
        return map_d2t(decode_ids(best), d2t, layout)

    return impl


key_without_zero_canon = _keyed(canonical_zero=False, canonical_nan=True)
key_without_nan_canon = _keyed(canonical_zero=True, canonical_nan=False)


def nan_ignored(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    """NaN logits treated as ``-inf``: the neighbour of a NaN often wins, which is not an off-by-one."""
    logits = checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap).nan_to_num(nan=float("-inf"))
    return map_d2t(pick_pairs(*local_best(logits, layout), group), d2t, layout)


def subnormals_flushed(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    """Subnormal logits flushed to zero (denormals-are-zero hardware): a precision slip, not an id bug."""
    logits = checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap)
    tiny = torch.finfo(logits.dtype).smallest_normal
    logits = torch.where(logits.float().abs() < tiny, torch.zeros_like(logits), logits)
    return map_d2t(pick_pairs(*local_best(logits, layout), group), d2t, layout)


def logits_in_float64(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    """Computes the logits, soft cap and scale in float64: values that tie in the head's dtype no longer do."""
    check_scale(scale, soft_cap)
    checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap)  # validation only
    logits = head_logits(hidden.double(), weight.double(), None if bias is None else bias.double(), scale, soft_cap)
    values, ids = local_best(logits, layout)
    gathered = group.all_gather(torch.stack([values, ids.double()], dim=-1))  # [tp, B, 2] in float64
    values, ids = gathered[..., 0], gathered[..., 1]
    best = values.max(dim=0).values  # NaN if any
    tied = torch.where(best.isnan(), values.isnan(), values == best)
    return map_d2t(torch.where(tied, ids, float("inf")).min(dim=0).values.long(), d2t, layout)


def tf32_matmul(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    """float32 logits from a TF32 matmul (``torch.backends.cuda.matmul.allow_tf32``): rule 1's GPU trap.

    On CUDA, cuBLAS's own TF32; on the CPU, ``properties.argmax.faults.tf32_linear``'s model of it.
    """
    checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap)  # validation only
    if hidden.dtype != torch.float32:  # TF32 changes float32 matmuls only
        return packed_key(hidden, weight, bias, layout, scale=scale, soft_cap=soft_cap, d2t=d2t, group=group)
    logits = tf32_linear(hidden, weight, bias)
    if soft_cap is not None:
        logits = torch.tanh(logits / soft_cap) * soft_cap
    logits = logits * scale if scale != 1.0 else logits
    return map_d2t(decode_ids(group.all_reduce(encode_keys(*local_best(logits, layout)), op="max")), d2t, layout)


def d2t_skipped(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    if d2t is not None:
        check_d2t(d2t, layout.vocab)
    values, ids = local_best(checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap), layout)
    return pick_pairs(values, ids, group)


def d2t_for_base_ids_only(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    """Maps base ids through d2t and returns added ids unmapped: a draft table built for the base vocabulary."""
    ids = pick_pairs(*local_best(checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap), layout), group)
    return torch.where(ids < layout.org_vocab, map_d2t(ids, d2t, layout), ids) if d2t is not None else ids


def inf_ties_by_rank(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    """Ties at +inf go to the lowest rank (a shortcut for an infinite maximum): with added ids, a lower rank can
    hold a larger id.  A thin meeting of the first coverage report: +inf and added ids."""
    values, ids = local_best(checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap), layout)
    gathered = group.all_gather(torch.stack([values.float(), ids.float()], dim=-1))  # [tp, B, 2]
    keys = encode_keys(gathered[..., 0], gathered[..., 1].long())
    best = gathered[..., 1].gather(0, keys.argmax(dim=0).unsqueeze(0)).squeeze(0).long()
    inf = gathered[..., 0] == torch.inf
    by_rank = gathered[..., 1].gather(0, inf.int().argmax(dim=0).unsqueeze(0)).squeeze(0).long()
    at_inf = inf.any(0) & ~gathered[..., 0].isnan().any(0)
    return map_d2t(torch.where(at_inf, by_rank, best), d2t, layout)


def cap_base_rows_only(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    """Applies the soft cap and the scale to the base rows only: the added rows (LoRA vocabulary) keep their raw
    logits, so an added id can win on a value the classic path never computes."""
    capped = checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap)
    raw = head_logits(hidden, weight, bias)
    logits = torch.cat([capped[:, : layout.added_row], raw[:, layout.added_row :]], dim=1)
    return map_d2t(reduce_pairs(logits, layout, group), d2t, layout)


NAN_BLOCK = 8


def nan_lost_in_blocks(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    """Reduces each shard in blocks of columns (as a GPU kernel does), keeping a later block's maximum only if it is
    larger: a NaN in a later block never is, so it loses to an earlier block's number."""
    values, ids = token_logits(checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap), layout)
    if not ids.numel():
        return vllm_pairs(hidden, weight, bias, layout, scale=scale, soft_cap=soft_cap, d2t=d2t, group=group)
    check_float_ids(layout.padded_vocab)
    blocks = -(-ids.numel() // NAN_BLOCK)
    padded = values.new_full((values.shape[0], blocks * NAN_BLOCK), float("-inf"))
    padded[:, : ids.numel()] = values
    best, at = padded.view(-1, blocks, NAN_BLOCK).max(dim=-1)  # within a block, torch's max: the first NaN wins
    # block after block, a later maximum replaces the kept one only if it is larger, which a NaN never is
    block = torch.where(best[:, 0].isnan(), 0, best.nan_to_num(nan=float("-inf")).argmax(dim=-1))
    index = block * NAN_BLOCK + at.gather(1, block.unsqueeze(1)).squeeze(1)
    value = best.gather(1, block.unsqueeze(1)).squeeze(1)
    return map_d2t(pick_pairs(value, ids[index], group), d2t, layout)


def rows_shifted_by_padding(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    """Pads the batch with zero rows to a power of two (a captured graph's size) and slices the answer from the
    wrong end: row i answers with padded row i + padding, a later row's token or a padding row's."""
    extra = (1 << (hidden.shape[0] - 1).bit_length()) - hidden.shape[0]
    padded = torch.cat([hidden, hidden.new_zeros(extra, hidden.shape[1])])
    tokens = vllm_pairs(padded, weight, bias, layout, scale=scale, soft_cap=soft_cap, d2t=d2t, group=group)
    return tokens[extra:]


def fused_fp32_epilogue(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    """A fused epilogue: a 16-bit head's logits, soft cap and scale computed in float32 and reduced as they are,
    never rounded to the head's dtype, so values that tie in bfloat16 no longer do."""
    checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap)  # validation only
    logits = head_logits(hidden.float(), weight.float(), None if bias is None else bias.float(), scale, soft_cap)
    return map_d2t(reduce_pairs(logits, layout, group), d2t, layout)


def scale_sign_ignored(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    logits = checked_shard_logits(hidden, weight, bias, layout, abs(scale) or 1.0, soft_cap)  # never rejects
    return map_d2t(pick_pairs(*local_best(logits, layout), group), d2t, layout)


def batched_path_differs(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    """Correct for one row (a decode-only path), highest rank on ties for batches."""
    impl = vllm_pairs if hidden.shape[0] == 1 else highest_rank_wins
    return impl(hidden, weight, bias, layout, scale=scale, soft_cap=soft_cap, d2t=d2t, group=group)


_calls: Counter[int] = Counter()  # calls per rank


def alternating_tie_break(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    """Every other call on a rank breaks cross-rank ties toward the highest rank."""
    _calls[group.rank] += 1
    impl = highest_rank_wins if _calls[group.rank] % 2 else vllm_pairs
    return impl(hidden, weight, bias, layout, scale=scale, soft_cap=soft_cap, d2t=d2t, group=group)


def last_rank_skips_the_exchange(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    if group.rank == group.world_size - 1:
        return torch.zeros(hidden.shape[0], dtype=torch.int64, device=hidden.device)  # its peers wait in all_gather
    return vllm_pairs(hidden, weight, bias, layout, scale=scale, soft_cap=soft_cap, d2t=d2t, group=group)


def rank_one_raises(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    if group.rank == 1:
        raise RuntimeError("rank 1 lost its shard")
    return vllm_pairs(hidden, weight, bias, layout, scale=scale, soft_cap=soft_cap, d2t=d2t, group=group)


def start_refused(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    """Never called: its start-up raises on every rank, as a vLLM that refuses the machine does."""
    raise AssertionError("never called: its start-up raised")


def _refuse(group) -> None:
    raise RuntimeError("this build needs the frobnicator kernels")


start_refused.start = _refuse


def rank_one_sleeps(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    if group.rank == 1:
        time.sleep(3600)  # hangs outside any collective
    return vllm_pairs(hidden, weight, bias, layout, scale=scale, soft_cap=soft_cap, d2t=d2t, group=group)


def rank_one_dies(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    if group.rank == 1:
        if not isinstance(group, TorchGroup):
            raise RuntimeError("rank_one_dies kills its process: run it on a process group, not the simulated one")
        os.kill(os.getpid(), signal.SIGKILL)
    return vllm_pairs(hidden, weight, bias, layout, scale=scale, soft_cap=soft_cap, d2t=d2t, group=group)


def node_one_goes_down(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    """Rank 1 takes its torchrun launcher down with it (SIGKILL to both): a node lost in a multi-node job."""
    if group.rank == 1:
        if not isinstance(group, TorchGroup):
            raise RuntimeError("node_one_goes_down kills its launcher: run it under torchrun, one rank per node")
        os.kill(os.getppid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
    return vllm_pairs(hidden, weight, bias, layout, scale=scale, soft_cap=soft_cap, d2t=d2t, group=group)
