"""A persistent pool of rank processes on a real ``torch.distributed`` group.

Started once and fed task after task (like PyTorch's MultiProcContinuousTest),
because spawning a group per example costs seconds while a round trip through a
live pool costs about a millisecond.  Each task names an implementation and
carries every rank's own arguments; each rank calls the implementation with a
:class:`~sharded.torch_group.TorchGroup` and sends back its output and traffic.

Faults end in an exception, never a hang: a rank that raises comes back with
its traceback; a rank that dies or does not answer within ``timeout`` is named,
and the pool is closed so that the next use starts a fresh one.  Rank processes
die with their driver (``PR_SET_PDEATHSIG`` on Linux, plus a parent check), and
:meth:`RankPool.close` runs at interpreter exit.
"""

from __future__ import annotations

import argparse
import atexit
import ctypes
import datetime
import os
import pickle
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from multiprocessing.connection import Client, Connection, Listener, wait
from typing import Any

from sharded.group import Traffic
from sharded.simulated import RankTimeout
from sharded.tasks import TaskRunner, in_step, outcome

DEFAULT_START_TIMEOUT = 120.0
_live_pools: weakref.WeakSet[RankPool] = weakref.WeakSet()


def _die_with_parent(parent_pid: int) -> None:
    if sys.platform == "linux":
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def _rank_main(
    rank: int, world_size: int, backend: str, store_path: str, timeout: float, conn: Connection, parent_pid: int
) -> None:
    import torch
    import torch.distributed as dist

    from sharded.torch_group import TorchGroup

    torch.set_num_threads(1)
    store = dist.FileStore(store_path, world_size)
    dist.init_process_group(
        backend, store=store, rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=timeout)
    )
    runner = TaskRunner(TorchGroup())
    _send(conn, ("ready", rank))
    while True:
        if not conn.poll(1.0):
            if os.getppid() != parent_pid:
                break
            continue
        try:
            task = _recv(conn)
        except EOFError:
            break
        if task is None:
            break
        _send(conn, runner.run(*task))
    dist.destroy_process_group()


def _worker(argv: list[str]) -> None:
    """Entry point of one rank process (``python -m sharded.pool ...``), started by :class:`RankPool`."""
    parser = argparse.ArgumentParser()
    for name in ("rank", "world-size", "parent-pid"):
        parser.add_argument(f"--{name}", type=int, required=True)
    for name in ("backend", "store", "address"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--timeout", type=float, required=True)
    args = parser.parse_args(argv)
    _die_with_parent(args.parent_pid)
    conn = Client(args.address, authkey=bytes.fromhex(os.environ.pop("TPARGMAX_POOL_KEY")))
    _send(conn, args.rank)
    _rank_main(args.rank, args.world_size, args.backend, args.store, args.timeout, conn, args.parent_pid)


def _send(conn: Connection, obj: object) -> None:
    """Plain pickle: tensors travel by value, not as shared-memory handles tied to one process."""
    conn.send_bytes(pickle.dumps(obj))


def _recv(conn: Connection) -> Any:
    return pickle.loads(conn.recv_bytes())


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
        self._dir = tempfile.mkdtemp(prefix="tpargmax-pool-")
        key = secrets.token_bytes(16)
        env = {
            **os.environ,
            "TPARGMAX_POOL_KEY": key.hex(),
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),  # ranks import what the driver can
            "PYTHONWARNINGS": "ignore:Failed to initialize NumPy",  # torch's import-time notice, not ours
        }
        self._procs: list[subprocess.Popen] = []
        self._conns: list[Connection] = []
        _live_pools.add(self)
        with Listener(os.path.join(self._dir, "sock"), authkey=key) as listener:
            for rank in range(world_size):
                cmd = [
                    sys.executable,
                    "-m",
                    "sharded.pool",
                    "--rank",
                    str(rank),
                    "--world-size",
                    str(world_size),
                    "--parent-pid",
                    str(os.getpid()),
                    "--backend",
                    backend,
                    "--store",
                    os.path.join(self._dir, "store"),
                    "--address",
                    listener.address,
                    "--timeout",
                    str(timeout),
                ]
                self._procs.append(subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL))
            self._conns = [None] * world_size  # type: ignore[list-item]
            listener._listener._socket.settimeout(start_timeout)  # never wait forever for a rank to call in
            try:
                for _ in range(world_size):
                    conn = listener.accept()
                    self._conns[_recv(conn)] = conn
            except OSError:
                self._fail_start([r for r, c in enumerate(self._conns) if c is None], start_timeout)
        _, missing = self._collect(start_timeout)
        if missing:
            self._fail_start(missing, start_timeout)

    def _fail_start(self, missing: list[int], waited: float) -> None:
        why = self._describe(missing, waited)
        self.close()
        raise RankTimeout(f"{self.backend} pool of {self.world_size} did not start: {why}")

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    @property
    def alive(self) -> bool:
        return bool(self._procs) and all(p.poll() is None for p in self._procs)

    def _describe(self, missing: list[int], waited: float) -> str:
        parts = []
        for rank in missing:
            code = self._procs[rank].poll()
            if code is None:
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
                    replies[rank] = _recv(conn)
                except (EOFError, OSError):
                    try:
                        self._procs[rank].wait(1.0)  # it died: let its exit code settle
                    except subprocess.TimeoutExpired:
                        pass
        return replies, sorted(set(range(self.world_size)) - set(replies))

    def run(self, spec: str, per_rank_kwargs: list[dict[str, Any]]) -> tuple[list[Any], list[Traffic]]:
        """Call implementation ``spec`` on every rank with its own kwargs; outputs and traffic in rank order."""
        if not self.alive:
            raise RuntimeError("this pool is closed; start a new one")
        for conn, kwargs in zip(self._conns, per_rank_kwargs, strict=True):
            _send(conn, (spec, kwargs))
        replies, missing = self._collect(self.timeout)
        absent = self._describe(missing, self.timeout)
        if not in_step(replies, self.world_size):
            self.close()  # the group is broken or out of step: the next use starts a fresh pool
        return outcome(replies, self.world_size, f"{self.backend} group", absent)

    def close(self) -> None:
        """Stop every rank process (politely, then by force) and remove the rendezvous files."""
        for conn in self._conns:
            if conn is not None:
                try:
                    _send(conn, None)
                except OSError:
                    pass
        deadline = time.monotonic() + 2.0
        for proc in self._procs:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
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


if __name__ == "__main__":
    _worker(sys.argv[1:])
