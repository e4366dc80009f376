"""The TP-group interface the rank code is written against, with byte counting.

Implementations: :mod:`groups.simulated` (threads in one process); the real
``torch.distributed`` groups (gloo, NCCL) fit the same four members.
"""

from __future__ import annotations

from collections import Counter
from typing import Literal, Protocol, runtime_checkable

import torch

ReduceOp = Literal["max", "min", "sum"]


@runtime_checkable
class TPGroup(Protocol):
    rank: int
    world_size: int

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every rank's ``tensor`` stacked in rank order: ``[world_size, *tensor.shape]``."""
        ...

    def all_reduce(self, tensor: torch.Tensor, op: ReduceOp = "sum") -> torch.Tensor:
        """A new tensor holding the elementwise reduction over ranks."""
        ...


def gathered(group: TPGroup, tensor: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Every rank's ``tensor`` concatenated along ``dim`` in rank order, as vLLM's and SGLang's
    ``all_gather(tensor, dim)`` give it (the engines' subjects call this in their place)."""
    return torch.cat(list(group.all_gather(tensor.contiguous()).unbind(0)), dim=dim)


class Traffic:
    """Bytes each collective delivered to this rank.

    ``all_gather`` counts its whole result (world_size x input), ``all_reduce``
    its buffer, so the local paths read ``B*2*tp*4`` and ``B*8`` bytes per step.
    """

    def __init__(self) -> None:
        self.bytes: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()

    def record(self, op: str, tensor: torch.Tensor) -> None:
        self.calls[op] += 1
        self.bytes[op] += tensor.numel() * tensor.element_size()

    @property
    def total(self) -> int:
        return sum(self.bytes.values())
