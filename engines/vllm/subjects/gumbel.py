"""vLLM 0.32.0's Gumbel-max sampler (``vllm/v1/worker/gpu/sample/gumbel.py``) run on vocab shards, as subjects.

vLLM samples on the gathered logits: ``gumbel_sample`` hands ``_gumbel_sample_kernel`` the full row, and each
program calls ``gumbel_noised_argmax(logits, keys=block, mask, seed, pos, temp)`` on 1024 columns, so a token's
noise is keyed by its **column**; the (value, column) pairs of the blocks are reduced by
``local_max.argmax(dim=-1)``.  Run on a rank's shard instead, the same kernel is a TP-local sampler once each rank's
(value, id) pair is reduced across ranks the same way.  Two subjects do that with vLLM's own function, loaded from
the wheel (``engines.vllm.wheel.triton_files``) and driven per shard by ``engines.vllm.subjects.gumbel_kernels``:

* ``vllm_gumbel_sharded``: the keys are the shard tokens' global (target) ids, so every token draws the noise it
  draws on the full row;
* ``vllm_gumbel_as_shipped``: the shard handed over as it is, keys = its columns, as ``gumbel_sample`` keys them.

Both declare vLLM's noise (``fn.noise``, read back from the same function at position 0, the position both pass),
so the oracle draws what vLLM draws over the whole vocabulary; neither takes top-k or top-p (vLLM masks those
logits to ``-inf`` before this kernel): ``fn.masks = False``.  Greedy rows (temperature 0) are the kernel's plain
``tl.max``.  The pair exchange is the project's glue: one all-gather of (value, id) per row and rank, then
``argmax`` over ranks in rank order, as ``gumbel_sample`` reduces its blocks.
"""

from __future__ import annotations

import importlib
import math

import torch

from engines.vllm.wheel.triton_files import why_unavailable
from reference.checks import InvalidInput
from reference.sampling import SamplingParams
from sharded.layout import ShardLayout
from sharded.local_sampling import sampler, shard_tokens
from sharded.triton_env import TRITON_LOCK, on_kernel_device

__all__ = ["vllm_gumbel_as_shipped", "vllm_gumbel_sharded", "vllm_gumbel_sharded_corrected", "why_unavailable"]


def _kernels():
    return importlib.import_module("engines.vllm.subjects.gumbel_kernels")


def vllm_noise(drafting: bool = False, step: int = 0):
    """vLLM's float32 Gumbel noise of (row seed, position 0, id), as ``fn.noise``: ``[B, n]``; ``step``: a draft
    walk's step, whose seed the release mixes (``gumbel_kernels.noise``)."""

    def noise(seeds: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        kernels = _kernels()  # imported (vLLM's file loaded) before the lock: the loader takes it too
        with TRITON_LOCK:
            out = kernels.noise(on_kernel_device(seeds), on_kernel_device(ids), drafting=drafting, step=step)
        return out.to(ids.device)

    noise.__name__ = ("vllm_draft_noise" if drafting else "vllm_noise") + (f"_step{step}" if step else "")
    return noise


def _shard_pair(values: torch.Tensor, keys: torch.Tensor, targets: torch.Tensor, sampling: SamplingParams):
    """This rank's (noised max, target id) per row, its blocks reduced as ``gumbel_sample`` reduces them."""
    batch = values.shape[0]
    if not values.shape[1]:  # a rank without tokens offers nothing that can win
        return values.new_full((batch,), -math.inf, dtype=torch.float64), values.new_zeros(batch, dtype=torch.int64)
    device, kernels = values.device, _kernels()
    with TRITON_LOCK:
        val, col = kernels.shard_argmax(
            on_kernel_device(values),
            on_kernel_device(keys),
            on_kernel_device(sampling.seed),
            on_kernel_device(sampling.temperature),
            drafting=False,
        )
    best = val.argmax(dim=-1, keepdim=True)  # gumbel_sample's local_max.argmax over its blocks
    column = col.gather(-1, best).squeeze(-1).to(device)
    # Compiled, tl.max(..., return_indices=True) can name a lane past the row (a NaN loses every comparison, to the
    # masked lanes' -inf too): no token has that column, so it comes back as id -1, out of every vocabulary.
    inside, targets = column < targets.numel(), targets.to(device)
    token = torch.where(inside, targets[column.clamp(max=targets.numel() - 1)], -1)
    return val.gather(-1, best).squeeze(-1).to(device, torch.float64), token


def _by_rank(gathered: torch.Tensor) -> torch.Tensor:
    """``gumbel_sample``'s reduction over the gathered ``[tp, B, (value, id)]``: argmax in rank order."""
    winner = gathered[:, :, 0].argmax(dim=0, keepdim=True)  # NaN first, ties to the lower rank
    return gathered[:, :, 1].gather(0, winner).squeeze(0).long()


def _by_id(gathered: torch.Tensor) -> torch.Tensor:
    """The correction: the largest value, a NaN above all, and ties (NaN with NaN too) to the smallest id."""
    value, ids = gathered[:, :, 0], gathered[:, :, 1]
    top = value.masked_fill(value.isnan(), math.inf).amax(dim=0, keepdim=True)
    best = torch.where(value.isnan().any(dim=0, keepdim=True), value.isnan(), value == top)
    return ids.masked_fill(~best, math.inf).amin(dim=0).long()


def _gumbel(keys_by_id: bool, name: str, reduce=_by_rank):
    def body(hidden, weight, bias, layout: ShardLayout, sampling: SamplingParams, scale, soft_cap, d2t, group):
        _, values, targets = shard_tokens(hidden, weight, bias, layout, scale, soft_cap, d2t, sampling)
        masked = ((sampling.top_k > 0) & (sampling.top_k < layout.vocab)) | (sampling.top_p < 1)
        if bool((masked & ~sampling.greedy).any()):
            raise InvalidInput(f"{name} samples without top-k or top-p (top_k 0 and top_p 1 on every row)")
        keys = targets if keys_by_id else torch.arange(values.shape[1], device=values.device)
        value, token = _shard_pair(values, keys, targets, sampling)
        gathered = group.all_gather(torch.stack([value, token.double()], dim=1))  # [tp, B, 2]
        return reduce(gathered)

    impl = sampler(body, name, None)
    impl.noise, impl.masks = vllm_noise(), False
    impl.start = lambda group: _kernels()  # loads vLLM's file and builds nothing else: outside the timeout
    impl.needs = why_unavailable  # vLLM's Triton file, and a GPU or Triton's interpreter
    return impl


vllm_gumbel_sharded = _gumbel(True, "vllm_gumbel_sharded")
vllm_gumbel_sharded.__doc__ = "vLLM's gumbel_noised_argmax on each shard, keyed by global ids; pairs reduced by argmax."
vllm_gumbel_sharded_corrected = _gumbel(True, "vllm_gumbel_sharded_corrected", _by_id)
vllm_gumbel_sharded_corrected.__doc__ = "vllm_gumbel_sharded with the pairs reduced by value, then by the smallest id."
vllm_gumbel_as_shipped = _gumbel(False, "vllm_gumbel_as_shipped")
vllm_gumbel_as_shipped.__doc__ = "The same kernel keyed by the shard's columns, as gumbel_sample keys a row."
