"""A simulated TP group: every rank a greenlet on one host thread, switched at each collective.

Each rank runs the real rank code and sees nothing but its own shard and what
the collectives hand back.  The ranks take turns, in rank order: a rank runs
until it enters a collective (or returns) and switches back to the driver; once
every rank waits in the same collective, the exchange happens and a new round
of turns begins.  Turn-taking is a valid schedule of concurrent ranks, and it
makes a run deterministic.  A switch between greenlets is a function call, not
a handoff between OS threads: the whole run costs the caller two thread
handoffs, to the host thread and back.

Faults are exact instead of timed: a rank that raises stops its peers, and a
deadlock (every rank still running waits in a collective that no other rank
will join: a peer returned, or called another one) is named at once.  Only a
rank that runs ``timeout`` seconds without reaching a collective is reported as
hung; the host thread is the only thing that cannot be stopped, and it is left
to the hung rank and never reused.
"""

from __future__ import annotations

import queue
import threading
import time
import traceback
from collections.abc import Callable
from typing import TypeVar

import greenlet
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


class _Host(threading.Thread):
    """A daemon thread that drives one run after another; idle ones wait in ``_IDLE``.

    A host whose run never ends (a hung rank) never comes back to the idle queue.
    """

    def __init__(self) -> None:
        super().__init__(name="tp-ranks", daemon=True)
        self.jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self.start()

    def run(self) -> None:
        while True:
            self.jobs.get()()
            _IDLE.put(self)


_IDLE: queue.SimpleQueue[_Host] = queue.SimpleQueue()


class _Seat:
    """One rank: its greenlet, the collective it waits in, and whether it has finished."""

    def __init__(self, glet: greenlet.greenlet) -> None:
        self.glet = glet
        self.call: tuple[str, torch.Tensor] | None = None
        self.finished = False


class _Run:
    """One run of ``rank_fn`` on every rank; the host thread drives it, the caller waits for its outcome."""

    def __init__(self, rank_fn: Callable[[SimGroup], T], world_size: int) -> None:
        self.rank_fn, self.world_size = rank_fn, world_size
        self.results: list = [None] * world_size
        self.errors: dict[int, BaseException] = {}
        self.outcome: BaseException | None = None  # what the caller raises; None once done: the results
        self.over = False
        self.done = threading.Event()
        self.turn = (0, time.monotonic())  # the rank running now, and since when: the caller's watchdog reads it
        self.seats: list[_Seat] = []
        self.groups: list[SimGroup] = []
        self.why = "the run ended"  # what stopped it, told to every rank still waiting

    def exchange(self, rank: int, what: str, tensor: torch.Tensor) -> list[torch.Tensor]:
        """Wait in collective ``what`` until every rank is in it; every rank's tensor in rank order."""
        if self.over:
            raise CollectiveError(f"rank {rank}: {what} called after the run ended")
        seat = self.seats[rank]
        if greenlet.getcurrent() is not seat.glet:
            raise CollectiveError(f"rank {rank}: {what} called outside its rank's task (from another thread?)")
        seat.call = (what, tensor.detach().clone())
        return seat.glet.parent.switch()  # the driver resumes this rank with every rank's tensor, or throws

    def body(self, rank: int, group: SimGroup) -> None:
        try:
            with guarded(f"rank {rank} of {self.world_size}"):  # SystemExit or os._exit: an ImplementationExit
                self.results[rank] = self.rank_fn(group)
        except BaseException as exc:  # noqa: BLE001 - reported to the caller
            self.errors[rank] = exc
        seat = self.seats[rank]
        seat.call, seat.finished = None, True

    def resume(self, rank: int, reply: object = None) -> None:
        """Give ``rank`` the turn until it waits in a collective or finishes."""
        self.turn = (rank, time.monotonic())
        self.seats[rank].glet.switch(reply)

    def drive(self) -> None:
        """The host thread's job: rounds of turns and exchanges until every rank finished or the run failed."""
        driver = greenlet.getcurrent()
        self.groups = [SimGroup(self, r) for r in range(self.world_size)]
        self.seats = [
            _Seat(greenlet.greenlet(lambda *_, r=r: self.body(r, self.groups[r]), parent=driver))
            for r in range(self.world_size)
        ]
        try:
            self.outcome = self.rounds()
        except BaseException as exc:  # noqa: BLE001 - a fault of the driver itself still reaches the caller
            self.outcome = exc
        finally:
            self.over = True
            self.stop()
            self.done.set()

    def rounds(self) -> BaseException | None:
        reply: list[torch.Tensor] | None = None
        while True:
            for rank, seat in enumerate(self.seats):
                if seat.finished:
                    continue
                if self.over:  # the caller gave up on a hung rank that has now come back
                    return None
                self.resume(rank, reply)
                if rank in self.errors:
                    exc = self.errors[rank]
                    where = f"raised on rank {rank} of {self.world_size}"
                    exc.add_note(f"{where}:\n{''.join(traceback.format_exception(exc))}")
                    self.why = f"rank {rank} raised"
                    return exc
            waiting = {r: s.call for r, s in enumerate(self.seats) if not s.finished}
            if not waiting:
                return None
            if len(waiting) < self.world_size:
                self.why = "a peer returned without joining"
                what = next(iter(waiting.values()))[0]
                returned = [r for r in range(self.world_size) if r not in waiting]
                return RankTimeout(
                    f"a collective was never joined: rank(s) {sorted(waiting)} waited in {what}, "
                    f"rank(s) {returned} of {self.world_size} returned without joining it (a real group would hang)"
                )
            if len({(w, t.dtype, tuple(t.shape), t.device.type) for w, t in waiting.values()}) != 1:
                self.why = "mismatched collectives"
                calls = "; ".join(
                    f"rank {r}: {w} {t.dtype} {tuple(t.shape)} on {t.device.type}" for r, (w, t) in waiting.items()
                )
                return CollectiveError(f"ranks called mismatched collectives: {calls}")
            reply = [t for _, t in waiting.values()]
            for seat in self.seats:
                seat.call = None

    def stop(self) -> None:
        """Every rank still waiting in a collective raises CollectiveError there and unwinds, so that no rank's
        task outlives its run; one never started is dropped."""
        for rank, seat in enumerate(self.seats):
            if seat.finished or not seat.glet:  # done, or never started: nothing to unwind
                continue
            what = seat.call[0] if seat.call else "a collective"
            self.turn = (rank, time.monotonic())
            seat.glet.throw(CollectiveError(f"rank {rank}: {what} aborted: {self.why}"))

    def wait(self, timeout: float) -> None:
        """The caller's side: wait for the outcome; a rank holding the turn ``timeout`` seconds is hung."""
        while not self.done.wait(max(0.0, self.turn[1] + timeout - time.monotonic())):
            rank, since = self.turn
            if time.monotonic() - since < timeout:
                continue  # the turn moved on meanwhile
            self.over = True  # the host stays with the hung rank; any rank it wakes again ends at its next collective
            if self.outcome is not None:  # a peer hung while being stopped: the cause still wins
                raise self.outcome
            raise RankTimeout(
                f"rank {rank} of {self.world_size} still running after {timeout}s, outside any collective (hung)",
                timeout,
            )
        if self.outcome is not None:
            raise self.outcome


def _here(parts: list[torch.Tensor], mine: torch.Tensor) -> list[torch.Tensor]:
    """Every rank's part on this rank's device (ranks on several GPUs), as a real collective delivers them."""
    return [p.to(mine.device) for p in parts]


class SimGroup:
    """One rank's view of a simulated group (see :class:`sharded.group.TPGroup`)."""

    def __init__(self, run: _Run, rank: int) -> None:
        self._run = run
        self.rank = rank
        self.world_size = run.world_size
        self.traffic = Traffic()

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        out = torch.stack(_here(self._run.exchange(self.rank, "all_gather", tensor), tensor))
        self.traffic.record("all_gather", out)
        return out

    def all_reduce(self, tensor: torch.Tensor, op: ReduceOp = "sum") -> torch.Tensor:
        if op not in _REDUCERS:
            raise ValueError(f"unsupported reduce op {op!r}; use one of {sorted(_REDUCERS)}")
        parts = _here(self._run.exchange(self.rank, f"all_reduce({op})", tensor), tensor)
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
    would hang a real group) or :class:`CollectiveError` at once; a rank that
    runs ``timeout`` seconds without reaching a collective raises :class:`RankTimeout` naming it.
    """
    run = _Run(rank_fn, world_size)
    try:
        host = _IDLE.get_nowait()
    except queue.Empty:
        host = _Host()
    host.jobs.put(run.drive)
    run.wait(timeout)
    return run.results, run.groups
