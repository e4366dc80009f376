"""Deliberately broken implementations: the suite must catch every one (tests/test_power.py, tests/test_pool.py).

Each is the correct local path with one bug that real engines have had or could
have, written from the same pieces as the built-ins so that only the bug differs.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter

import torch

from reference.checks import check_d2t, check_scale
from sharded.keys import decode_ids, encode_keys
from sharded.local_argmax import checked_shard_logits, local_best, map_d2t, pick_pairs, vllm_pairs
from sharded.torch_group import TorchGroup


def no_padding_mask(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    values, index = checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap).max(dim=-1)
    ids = pick_pairs(values, index + layout.start, group)  # padding rows competed
    if d2t is None:
        return ids
    targets = check_d2t(d2t, layout.vocab)
    return torch.where(ids < layout.vocab, targets[ids.clamp(max=layout.vocab - 1)], ids)


def last_index_in_shard(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    logits = checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap)
    logits[:, layout.num_real :] = float("-inf")
    values, index = logits.flip(-1).max(dim=-1)  # first maximum of the reversed shard: the last one
    return map_d2t(pick_pairs(values, layout.end - 1 - index, group), d2t, layout)


def highest_rank_wins(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    values, ids = local_best(checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap), layout)
    gathered = group.all_gather(torch.stack([values.float(), ids.float()], dim=-1))  # [tp, B, 2]
    winner = gathered.shape[0] - 1 - gathered[..., 0].flip(0).argmax(dim=0)
    return map_d2t(gathered[..., 1].gather(0, winner.unsqueeze(0)).squeeze(0).long(), d2t, layout)


def ids_in_bf16(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    values, ids = local_best(checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap), layout)
    ids = pick_pairs(values, ids.to(torch.bfloat16).long(), group)  # ids above 256 round
    return map_d2t(ids.clamp(max=layout.vocab - 1), d2t, layout)


def off_by_one_at_shard_start(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    values, ids = local_best(checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap), layout)
    return map_d2t(pick_pairs(values, ids - int(layout.rank > 0), group), d2t, layout)


def softcap_after_choosing(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    check_scale(scale, soft_cap)
    raw = checked_shard_logits(hidden, weight, bias, layout, scale, None)
    _, ids = local_best(raw, layout)
    capped = raw if soft_cap is None else torch.tanh(raw / soft_cap) * soft_cap
    capped[:, layout.num_real :] = float("-inf")
    values = capped.gather(1, (ids - layout.start).unsqueeze(1)).squeeze(1)
    return map_d2t(pick_pairs(values, ids, group), d2t, layout)


def _keyed(canonical_zero: bool, canonical_nan: bool):
    def impl(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
        logits = checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap)
        logits[:, layout.num_real :] = float("-inf")
        ids = torch.arange(layout.start, layout.end).expand_as(logits)
        keys = encode_keys(logits, ids, canonical_zero=canonical_zero, canonical_nan=canonical_nan)
        best = group.all_reduce(keys.max(dim=-1).values, op="max")  # local and global choice by key
        return map_d2t(decode_ids(best), d2t, layout)

    return impl


key_without_zero_canon = _keyed(canonical_zero=False, canonical_nan=True)
key_without_nan_canon = _keyed(canonical_zero=True, canonical_nan=False)


def d2t_skipped(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    if d2t is not None:
        check_d2t(d2t, layout.vocab)
    values, ids = local_best(checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap), layout)
    return pick_pairs(values, ids, group)


def scale_sign_ignored(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    logits = checked_shard_logits(hidden, weight, bias, layout, abs(scale) or 1.0, soft_cap)  # never rejects
    return map_d2t(pick_pairs(*local_best(logits, layout), group), d2t, layout)


def batched_path_differs(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    """Correct for one row (a decode-only path), highest rank on ties for batches."""
    impl = vllm_pairs if hidden.shape[0] == 1 else highest_rank_wins
    return impl(hidden, weight, bias, layout, scale=scale, soft_cap=soft_cap, d2t=d2t, group=group)


_calls: Counter[str] = Counter()


def alternating_tie_break(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    """Every other call on a rank breaks cross-rank ties toward the highest rank."""
    _calls[threading.current_thread().name] += 1
    impl = highest_rank_wins if _calls[threading.current_thread().name] % 2 else vllm_pairs
    return impl(hidden, weight, bias, layout, scale=scale, soft_cap=soft_cap, d2t=d2t, group=group)


def last_rank_skips_the_exchange(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    if group.rank == group.world_size - 1:
        return torch.zeros(hidden.shape[0], dtype=torch.int64)  # its peers wait in all_gather
    return vllm_pairs(hidden, weight, bias, layout, scale=scale, soft_cap=soft_cap, d2t=d2t, group=group)


def rank_one_raises(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    if group.rank == 1:
        raise RuntimeError("rank 1 lost its shard")
    return vllm_pairs(hidden, weight, bias, layout, scale=scale, soft_cap=soft_cap, d2t=d2t, group=group)


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
