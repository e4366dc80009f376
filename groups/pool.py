"""A persistent pool of rank processes on a real ``torch.distributed`` group.

Started once and fed task after task (like PyTorch's MultiProcContinuousTest),
because spawning a group per example costs seconds while a round trip through a
live pool costs about a millisecond.  Each task names an implementation and
carries every rank's own arguments; each rank calls the implementation with a
:class:`~groups.torch_group.TorchGroup` and sends back its output and traffic.

Faults end in an exception, never a hang: a rank that raises comes back with
its traceback; a rank that dies or does not answer within ``timeout`` is named,
and the pool is closed so that the next use starts a fresh one.  Ranks fork
from a server process that imported torch once (multiprocessing's fork
server), so starting a pool takes milliseconds after the first.  Rank processes
die with their driver: the fork server exits when the driver does, each rank
dies with the fork server (``PR_SET_PDEATHSIG`` on Linux) and stops when the
driver's end of its connection closes; :meth:`RankPool.close` runs at
interpreter exit.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import secrets
import shutil
import signal
import tempfile
import time
import weakref
from multiprocessing.connection import Connection, Listener, wait
from typing import Any

from groups.simulated import RankTimeout
from groups.tasks import in_step, outcome, started
from groups.wire import recv, send
from sharded.group import Traffic

DEFAULT_START_TIMEOUT = 120.0
_live_pools: weakref.WeakSet[RankPool] = weakref.WeakSet()
# Ranks fork from one server process per driver that has imported torch once (see groups.rank_process).
_FORK = multiprocessing.get_context("forkserver")
_FORK.set_forkserver_preload(["groups.rank_process"])


class RankPool:
    """``world_size`` rank processes joined in one ``backend`` group, reused task after task."""

    def __init__(
        self,
        world_size: int,
        *,
        backend: str = "gloo",
        timeout: float = 10.0,
        start_timeout: float = DEFAULT_START_TIMEOUT,
    ) -> None:
        self.world_size = world_size
        self.backend = backend
        self.timeout = timeout
        self.start_timeout = start_timeout
        self._started: set[str] = set()  # implementations every rank has loaded and started
        self._closed: set[int] = set()  # ranks that closed their connection without a reply
        self._dir = tempfile.mkdtemp(prefix="tpargmax-pool-")
        key = secrets.token_bytes(16)
        self._procs: list[multiprocessing.process.BaseProcess] = []
        self._conns: list[Connection] = []
        _live_pools.add(self)
        store = os.path.join(self._dir, "store")
        with Listener(os.path.join(self._dir, "sock"), authkey=key) as listener:
            for rank in range(world_size):
                args = (rank, world_size, backend, store, timeout, listener.address, key)
                proc = _FORK.Process(target=_rank_main, args=args, name=f"tpargmax-rank-{rank}", daemon=True)
                proc.start()
                self._procs.append(proc)
            self._conns = [None] * world_size  # type: ignore[list-item]
            listener._listener._socket.settimeout(start_timeout)  # never wait forever for a rank to call in
            try:
                for _ in range(world_size):
                    conn = listener.accept()
                    self._conns[recv(conn)] = conn
            except OSError:
                self._fail_start([r for r, c in enumerate(self._conns) if c is None], start_timeout)
        _, missing = self._collect(start_timeout)
        if missing:
            self._fail_start(missing, start_timeout)

    def _fail_start(self, missing: list[int], waited: float) -> None:
        why = self._describe(missing, waited)
        self.close()
        raise RankTimeout(f"{self.backend} pool of {self.world_size} did not start: {why}", waited, "start-up timeout")

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    @property
    def alive(self) -> bool:
        return bool(self._procs) and all(p.exitcode is None for p in self._procs)

    def _describe(self, missing: list[int], waited: float) -> str:
        parts = []
        for rank in missing:
            code = self._procs[rank].exitcode
            closed = rank in self._closed and code in (None, 0)  # not a consequence of dying: its own doing
            if closed:
                then = ", then exited with status 0" if code == 0 else ""
                parts.append(f"rank {rank} closed its connection without a reply{then}")
            elif code is None:
                parts.append(f"rank {rank} did not answer within {waited}s (hung)")
            elif code < 0:
                parts.append(f"rank {rank} died ({signal.Signals(-code).name})")
            else:
                parts.append(f"rank {rank} exited with status {code}")
        return "; ".join(parts)

    def _collect(self, timeout: float, grace: float = 1.0) -> tuple[dict[int, tuple], list[int]]:
        """Replies by rank, and the ranks that gave none (dead, hung, or stuck behind a failed peer)."""
        replies: dict[int, tuple] = {}
        pending = set(range(self.world_size))
        deadline = time.monotonic() + timeout
        while pending:
            trouble = any(r[0] == "error" for r in replies.values()) or len(replies) + len(pending) < self.world_size
            if trouble:  # peers of a failed rank may be stuck in a collective: wait briefly only
                deadline = min(deadline, time.monotonic() + grace)
            left = deadline - time.monotonic()
            ready = wait([self._conns[r] for r in pending], timeout=max(0.0, left)) if left > 0 else []
            if not ready:
                break
            for conn in ready:
                rank = self._conns.index(conn)
                pending.discard(rank)
                try:
                    replies[rank] = recv(conn)
                except (EOFError, OSError):
                    self._closed.add(rank)
                    self._procs[rank].join(1.0)  # it died or is dying: let its exit code settle
        return replies, sorted(set(range(self.world_size)) - set(replies))

    def run(self, spec: str, per_rank_kwargs: list[dict[str, Any]]) -> tuple[list[Any], list[Traffic]]:
        """Call implementation ``spec`` on every rank with its own kwargs; outputs and traffic in rank order.

        The first task of an implementation is preceded by its start-up on every rank, under the start
        timeout rather than the collective timeout (see :meth:`sharded.impls.Impl.start`).
        """
        if not self.alive:
            raise RuntimeError("this pool is closed; start a new one")
        if len(per_rank_kwargs) != self.world_size:  # checked before sending anything, to keep the ranks in step
            raise ValueError(f"a task for {len(per_rank_kwargs)} ranks on a pool of {self.world_size}")
        if spec not in self._started:
            what, nothing = f"start-up of {spec} on the ", [None] * self.world_size
            started(spec, lambda: self._task(spec, nothing, self.start_timeout, what, "start-up timeout"))
            self._started.add(spec)
        return self._task(spec, per_rank_kwargs, self.timeout, "", "collective timeout")

    def _task(
        self, spec: str, per_rank_kwargs: list, timeout: float, what: str, limit_name: str
    ) -> tuple[list[Any], list[Traffic]]:
        for conn, kwargs in zip(self._conns, per_rank_kwargs, strict=True):
            send(conn, (spec, kwargs))
        replies, missing = self._collect(timeout)
        absent = self._describe(missing, timeout)
        lost = any(rank in self._closed or self._procs[rank].exitcode is not None for rank in missing)
        if not in_step(replies, self.world_size):
            self.close(wait=0.0)  # broken or out of step, so ranks may be stuck: the next use starts a fresh pool
        return outcome(replies, self.world_size, f"{what}{self.backend} group", absent, lost, timeout, limit_name)

    def close(self, wait: float = 2.0) -> None:
        """Stop every rank process (politely for up to ``wait`` seconds, then by force); remove the rendezvous files."""
        for conn in self._conns:
            if conn is not None:
                try:
                    send(conn, None)
                except OSError:
                    pass
        deadline = time.monotonic() + wait
        for proc in self._procs:
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.exitcode is None:
                proc.kill()
                proc.join()
        for conn in self._conns:
            if conn is not None:
                conn.close()
        self._procs, self._conns = [], []
        shutil.rmtree(self._dir, ignore_errors=True)
        _live_pools.discard(self)


@atexit.register
def close_all_pools() -> None:
    for pool in list(_live_pools):
        pool.close()


def _rank_main(*args: Any) -> None:
    """A rank process's target; the fork server has ``groups.rank_process`` imported already."""
    from groups.rank_process import main

    main(*args)
