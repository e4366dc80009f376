"""The TP-group interface over a real ``torch.distributed`` process group (gloo or NCCL)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from sharded.group import ReduceOp, Traffic

_OPS = {"max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN, "sum": dist.ReduceOp.SUM}
# torch 2.13 renamed all_gather_into_tensor; keep both spellings working.
all_gather_flat = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


class TorchGroup:
    """One rank's view of a process group; timeouts come from the group's own init timeout."""

    def __init__(self, group: dist.ProcessGroup | None = None) -> None:
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.traffic = Traffic()
        self.collective_failed = False  # set when a collective raised: a peer died, hung or fell out of step

    def _call(self, collective, *args) -> None:
        try:
            collective(*args, group=self.group)
        except Exception:
            self.collective_failed = True
            raise

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        flat = tensor.contiguous().reshape(-1)
        out = flat.new_empty(self.world_size * flat.numel())
        self._call(all_gather_flat, out, flat)
        out = out.view(self.world_size, *tensor.shape)
        self.traffic.record("all_gather", out)
        return out

    def all_reduce(self, tensor: torch.Tensor, op: ReduceOp = "sum") -> torch.Tensor:
        if op not in _OPS:
            raise ValueError(f"unsupported reduce op {op!r}; use one of {sorted(_OPS)}")
        out = tensor.detach().clone()
        self._call(dist.all_reduce, out, _OPS[op])
        self.traffic.record("all_reduce", out)
        return out
