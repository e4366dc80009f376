"""A simulated TP group: one thread per rank, exchanging only through collectives.

Each rank runs the real rank code concurrently and sees nothing but its own
shard and what the collectives hand back.  Every collective waits at most
``timeout`` seconds; a rank that raises aborts its peers at once, and a rank
that hangs is named in the error instead of hanging the test.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable
from typing import TypeVar

import torch

from sharded.group import ReduceOp, Traffic

T = TypeVar("T")
DEFAULT_TIMEOUT = 10.0
_REDUCERS = {"max": torch.maximum, "min": torch.minimum, "sum": torch.add}


class CollectiveError(RuntimeError):
    """A collective could not complete: mismatched calls, or a peer failed."""


class CollectiveTimeout(CollectiveError):
    """This rank waited ``timeout`` seconds in a collective that some peer never joined."""


class RankTimeout(RuntimeError):
    """A rank hung, or a collective timed out; the message names the ranks."""


class _World:
    def __init__(self, world_size: int, timeout: float) -> None:
        self.world_size = world_size
        self.timeout = timeout
        self.barrier = threading.Barrier(world_size)
        self.slots: list[tuple[str, torch.Tensor] | None] = [None] * world_size
        self.failed = False  # set by a rank that raised, before it aborts the barrier

    def _wait(self, rank: int, what: str) -> None:
        try:
            self.barrier.wait(self.timeout)
        except threading.BrokenBarrierError:
            if self.failed:
                raise CollectiveError(f"rank {rank}: {what} aborted because a peer failed") from None
            raise CollectiveTimeout(f"rank {rank}: {what} timed out after {self.timeout}s") from None

    def exchange(self, rank: int, what: str, tensor: torch.Tensor) -> list[torch.Tensor]:
        self.slots[rank] = (what, tensor.detach().clone())
        self._wait(rank, what)
        entries = list(self.slots)
        self._wait(rank, what)  # nobody refills a slot before every rank has read it
        signatures = {(w, t.dtype, tuple(t.shape)) for w, t in entries}
        if len(signatures) != 1:
            calls = "; ".join(f"rank {r}: {w} {t.dtype} {tuple(t.shape)}" for r, (w, t) in enumerate(entries))
            raise CollectiveError(f"ranks called mismatched collectives: {calls}")
        return [t for _, t in entries]


class SimGroup:
    """One rank's view of a simulated group (see :class:`sharded.group.TPGroup`)."""

    def __init__(self, world: _World, rank: int) -> None:
        self._world = world
        self.rank = rank
        self.world_size = world.world_size
        self.traffic = Traffic()

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        out = torch.stack(self._world.exchange(self.rank, "all_gather", tensor))
        self.traffic.record("all_gather", out)
        return out

    def all_reduce(self, tensor: torch.Tensor, op: ReduceOp = "sum") -> torch.Tensor:
        if op not in _REDUCERS:
            raise ValueError(f"unsupported reduce op {op!r}; use one of {sorted(_REDUCERS)}")
        parts = self._world.exchange(self.rank, f"all_reduce({op})", tensor)
        out = parts[0].clone()
        for part in parts[1:]:
            out = _REDUCERS[op](out, part)
        self.traffic.record("all_reduce", out)
        return out


def run_simulated(
    rank_fn: Callable[[SimGroup], T], world_size: int, timeout: float = DEFAULT_TIMEOUT
) -> tuple[list[T], list[SimGroup]]:
    """Run ``rank_fn(group)`` on every rank concurrently; return results and groups in rank order.

    If a rank raises, its exception is re-raised (the lowest such rank's, with a
    note naming it and its traceback); if a rank hangs or a collective times
    out, :class:`RankTimeout` names the ranks.
    """
    world = _World(world_size, timeout)
    groups = [SimGroup(world, r) for r in range(world_size)]
    results: list = [None] * world_size
    errors: dict[int, BaseException] = {}

    def body(rank: int) -> None:
        try:
            results[rank] = rank_fn(groups[rank])
        except BaseException as exc:  # noqa: BLE001 - reported to the caller below
            if not isinstance(exc, CollectiveError):
                world.failed = True
            exc.add_note(f"raised on rank {rank} of {world_size}:\n{traceback.format_exc()}")
            errors[rank] = exc
            world.barrier.abort()

    threads = [threading.Thread(target=body, args=(r,), name=f"tp-rank-{r}", daemon=True) for r in range(world_size)]
    for t in threads:
        t.start()
    # A rank blocked in a collective gives up after `timeout`; allow one more for the rest.
    deadline = time.monotonic() + 2 * timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    hung = [r for r, t in enumerate(threads) if t.is_alive()]
    if hung:
        world.barrier.abort()
        raise RankTimeout(f"rank(s) {hung} of {world_size} still running after {2 * timeout}s, outside any collective")
    primary = {r: e for r, e in errors.items() if not isinstance(e, CollectiveError) or "mismatched" in str(e)}
    if primary:
        raise errors[min(primary)]
    if errors:
        waited = sorted(errors)
        absent = [r for r in range(world_size) if r not in errors]
        raise RankTimeout(
            f"a collective timed out after {timeout}s: rank(s) {waited} waited in it, "
            f"rank(s) {absent} of {world_size} never joined (returned early or called another collective)"
        )
    return results, groups
