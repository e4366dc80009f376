"""The rank side of :class:`groups.pool.RankPool`: one process of the group, serving tasks until told to stop.

This module is the entry point of every rank process.  The pool's fork server
imports it once, torch included, and forks each rank from there, so a rank
starts in milliseconds instead of importing torch again.
"""

from sharded import quiet_numpy_notice

quiet_numpy_notice()  # the fork server imports torch below, in front of the user's terminal

import ctypes
import datetime
import os
import signal
import sys
from multiprocessing.connection import Client

import torch
import torch.distributed as dist

from groups.tasks import TaskRunner
from groups.torch_group import TorchGroup
from groups.wire import recv, send

# A rank's own collectives give up later than the driver does, so that a rank the driver finds
# silent is always reported as hung, never as an error that raced in; the driver then closes the pool.
BACKSTOP = 2.0


def _die_with_parent() -> int:
    """Die with the fork server (which dies with the driver); return its pid."""
    parent = os.getppid()
    if sys.platform == "linux":
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)
    return parent


def main(rank: int, world_size: int, backend: str, store_path: str, timeout: float, address: str, key: bytes) -> None:
    """Join the group, then run each task the driver sends until it sends ``None`` or goes away."""
    parent = _die_with_parent()
    conn = Client(address, authkey=key)
    send(conn, rank)
    torch.set_num_threads(1)
    store = dist.FileStore(store_path, world_size)
    dist.init_process_group(
        backend, store=store, rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=BACKSTOP * timeout)
    )
    runner = TaskRunner(TorchGroup())
    send(conn, ("ready", rank))
    while True:
        if not conn.poll(1.0):
            if os.getppid() != parent:
                break
            continue
        try:
            task = recv(conn)
        except EOFError:  # the driver went away
            break
        if task is None:
            break
        try:
            send(conn, runner.run(*task))
        except OSError:  # the implementation closed this end of the connection: the driver names it
            break
    dist.destroy_process_group()
