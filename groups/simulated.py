"""A simulated TP group: one thread per rank, exchanging only through collectives.

Each rank runs the real rank code and sees nothing but its own shard and what
the collectives hand back.  The ranks take turns, in rank order: the driver
hands the turn to one rank, which runs until it enters a collective (or
returns) and hands it back; once every rank waits in the same collective, the
exchange happens and a new round of turns begins.  Turn-taking is a valid
schedule of concurrent ranks, and it makes a run deterministic and fast: no two
rank threads ever contend for the GIL.

It also makes faults exact instead of timed: a rank that returns or calls
another collective while its peers wait is named at once, and a rank that
raises stops its peers.  Only a rank that runs ``timeout`` seconds without
reaching a collective is reported as hung.
"""

from __future__ import annotations

import queue
import threading
import time
import traceback
from collections.abc import Callable
from typing import TypeVar

import torch

from sharded.group import ReduceOp, Traffic
from sharded.no_exit import guarded

T = TypeVar("T")
DEFAULT_TIMEOUT = 10.0
_REDUCERS = {"max": torch.maximum, "min": torch.minimum, "sum": torch.add}


class CollectiveError(RuntimeError):
    """A collective could not complete: mismatched calls, or a peer failed."""


class RankTimeout(RuntimeError):
    """A rank hung, or some rank never joined a collective its peers wait in; the message names the ranks.

    ``limit`` is the timeout, in seconds, that ran out before the fault showed (``limit_name`` says which), or None
    where it showed without a wait (a rank returned while its peers waited): a slow implementation is told apart
    from a hung one only by a larger limit, so the report names it.
    """

    def __init__(self, message: str, limit: float | None = None, limit_name: str = "collective timeout") -> None:
        super().__init__(message)
        self.limit, self.limit_name = limit, limit_name


def _baton() -> threading.Lock:
    """A held lock as a binary semaphore: another thread's ``release`` hands the turn over (and fast, in C)."""
    lock = threading.Lock()
    lock.acquire()
    return lock


class _RankThread(threading.Thread):
    """A daemon thread that runs one rank's job after another; idle ones wait in ``_IDLE``.

    Reusing threads saves a thread start per rank per run; a thread whose job
    never ends (a hung rank) simply never comes back to the idle queue.
    """

    def __init__(self) -> None:
        super().__init__(name="tp-rank", daemon=True)
        self.jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self.start()

    def run(self) -> None:
        while True:
            self.jobs.get()()


_IDLE: queue.SimpleQueue[_RankThread] = queue.SimpleQueue()


class _Turn:
    """One rank's seat at the table: how to resume it, what it waits in and what it gets back."""

    def __init__(self, job: Callable[[], None]) -> None:
        self.job: Callable[[], None] | None = job  # its first turn: handed to an idle thread
        self.go = _baton()  # its later turns
        self.call: tuple[str, torch.Tensor] | None = None  # the collective this rank waits in
        self.reply: list[torch.Tensor] | None = None
        self.abort: str | None = None  # why the run ended while this rank waited
        self.finished = False
        self.done = threading.Event()  # set as its thread lets go of the job


class _World:
    def __init__(self, world_size: int, jobs: list[Callable[[], None]]) -> None:
        self.world_size = world_size
        self.turns = [_Turn(job) for job in jobs]
        self.back = _baton()  # a rank hands the turn back to the driver
        self.over = False

    def resume(self, rank: int) -> None:
        """Give ``rank`` the turn (the driver does)."""
        turn = self.turns[rank]
        if turn.job is None:
            turn.go.release()
            return
        job, turn.job = turn.job, None
        try:
            thread = _IDLE.get_nowait()
        except queue.Empty:
            thread = _RankThread()
        thread.jobs.put(job)

    def hand_back(self) -> None:
        """End this rank's turn (unless the run has ended, when nobody waits for it)."""
        if not self.over:
            self.back.release()

    def exchange(self, rank: int, what: str, tensor: torch.Tensor) -> list[torch.Tensor]:
        """Wait in collective ``what`` until every rank is in it; every rank's tensor in rank order."""
        turn = self.turns[rank]
        if self.over:
            raise CollectiveError(f"rank {rank}: {what} called after the run ended")
        turn.call, turn.reply = (what, tensor.detach().clone()), None
        self.hand_back()
        turn.go.acquire()
        turn.call = None
        if turn.abort is not None:
            raise CollectiveError(f"rank {rank}: {what} aborted: {turn.abort}")
        return turn.reply

    def stop(self, why: str, grace: float) -> None:
        """End the run: every rank still waiting in a collective raises CollectiveError and exits, and the driver
        waits up to ``grace`` seconds for them to let go of their jobs: a rank thread still in torch code when the
        process exits can abort it ("terminate called without an active exception", measured under load)."""
        self.over = True
        woken = [turn for turn in self.turns if turn.call is not None and not turn.finished]
        for turn in woken:
            turn.abort = why
            try:
                turn.go.release()
            except RuntimeError:  # its turn was being handed over as the run ended: it wakes anyway
                pass
        deadline = time.monotonic() + grace
        for turn in woken:
            turn.done.wait(max(0.0, deadline - time.monotonic()))


def _here(parts: list[torch.Tensor], mine: torch.Tensor) -> list[torch.Tensor]:
    """Every rank's part on this rank's device (ranks on several GPUs), as a real collective delivers them."""
    return [p.to(mine.device) for p in parts]


class SimGroup:
    """One rank's view of a simulated group (see :class:`sharded.group.TPGroup`)."""

    def __init__(self, world: _World, rank: int) -> None:
        self._world = world
        self.rank = rank
        self.world_size = world.world_size
        self.traffic = Traffic()

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        out = torch.stack(_here(self._world.exchange(self.rank, "all_gather", tensor), tensor))
        self.traffic.record("all_gather", out)
        return out

    def all_reduce(self, tensor: torch.Tensor, op: ReduceOp = "sum") -> torch.Tensor:
        if op not in _REDUCERS:
            raise ValueError(f"unsupported reduce op {op!r}; use one of {sorted(_REDUCERS)}")
        parts = _here(self._world.exchange(self.rank, f"all_reduce({op})", tensor), tensor)
        out = parts[0].clone()
        for part in parts[1:]:
            out = _REDUCERS[op](out, part)
        self.traffic.record("all_reduce", out)
        return out


def run_simulated(
    rank_fn: Callable[[SimGroup], T], world_size: int, timeout: float = DEFAULT_TIMEOUT
) -> tuple[list[T], list[SimGroup]]:
    """Run ``rank_fn(group)`` on every rank, turn by turn; return results and groups in rank order.

    If a rank raises, its exception is re-raised with a note naming the rank and
    its traceback, and its peers are stopped; a rank that tries to end the process
    (``SystemExit``, ``os._exit``) raises :class:`sharded.no_exit.ImplementationExit`.  A rank that returns or calls
    another collective while its peers wait raises :class:`RankTimeout` (as it
    would hang a real group) or :class:`CollectiveError`; so does a rank that
    runs ``timeout`` seconds without reaching a collective.
    """
    results: list = [None] * world_size
    errors: dict[int, BaseException] = {}

    def job(rank: int) -> Callable[[], None]:
        def body() -> None:
            threading.current_thread().name = f"tp-rank-{rank}"
            try:
                with guarded(f"rank {rank} of {world_size}"):  # SystemExit or os._exit: an ImplementationExit
                    results[rank] = rank_fn(groups[rank])
            except BaseException as exc:  # noqa: BLE001 - reported to the caller below
                errors[rank] = exc  # its traceback is formatted by the driver: see below
            turn = world.turns[rank]
            turn.call, turn.finished = None, True
            _IDLE.put(threading.current_thread())  # free before the turn goes back, so the next run reuses it
            world.hand_back()
            turn.done.set()

        return body

    world = _World(world_size, [job(r) for r in range(world_size)])
    groups = [SimGroup(world, r) for r in range(world_size)]
    while True:
        for rank, turn in enumerate(world.turns):
            if turn.finished:
                continue
            world.resume(rank)
            if not world.back.acquire(timeout=timeout):
                world.stop(f"rank {rank} hung", timeout)
                raise RankTimeout(
                    f"rank {rank} of {world_size} still running after {timeout}s, outside any collective (hung)",
                    timeout,
                )
            if rank in errors:
                break
        if errors:
            first = min(errors)
            world.stop(f"rank {first} raised", timeout)
            exc = errors[first]
            # Formatted here, in the driver's thread: Python 3.11's traceback module parses source with
            # ast, which is not safe in two threads at once (CPython gh-106905), and stopped ranks wake now.
            exc.add_note(f"raised on rank {first} of {world_size}:\n{''.join(traceback.format_exception(exc))}")
            raise exc
        waiting = {r: t.call for r, t in enumerate(world.turns) if not t.finished}
        if not waiting:
            return results, groups
        if len(waiting) < world_size:
            world.stop("a peer returned without joining", timeout)
            what = next(iter(waiting.values()))[0]
            returned = [r for r in range(world_size) if r not in waiting]
            raise RankTimeout(
                f"a collective was never joined: rank(s) {sorted(waiting)} waited in {what}, "
                f"rank(s) {returned} of {world_size} returned without joining it (a real group would hang)"
            )
        if len({(w, t.dtype, tuple(t.shape), t.device.type) for w, t in waiting.values()}) != 1:
            world.stop("mismatched collectives", timeout)
            calls = "; ".join(
                f"rank {r}: {w} {t.dtype} {tuple(t.shape)} on {t.device.type}" for r, (w, t) in waiting.items()
            )
            raise CollectiveError(f"ranks called mismatched collectives: {calls}")
        parts = [t for _, t in waiting.values()]
        for turn in world.turns:
            turn.reply = parts
