"""A torchrun job as the TP group: rank 0 drives, every rank runs the same task code.

Under ``torchrun --nproc-per-node N``, rank 0 sends each task (implementation
and every rank's arguments) to the others and runs its own share; the replies
come back to rank 0, which judges them like the process pool does.  The TP group
is gloo on the CPU and NCCL on CUDA (``--device cuda``), each rank on its own GPU:
NCCL refuses two ranks on one GPU, so CUDA needs N GPUs.  Tasks and replies
always travel over a separate gloo group as pickled bytes (no ``*_object``
collectives, which need NumPy).
"""

from __future__ import annotations

import ctypes
import datetime
import os
import pickle
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist

from groups.devices import check_device
from groups.tasks import RankLost, TaskRunner, outcome, started
from groups.torch_group import TorchGroup, all_gather_flat
from sharded.group import Traffic


def _bytes(t: torch.Tensor) -> bytes:
    """The bytes of a contiguous CPU uint8 tensor (without NumPy)."""
    t = t.contiguous()
    return ctypes.string_at(t.data_ptr(), t.numel())


def _to(obj: Any, device: torch.device) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: _to(v, device) for k, v in obj.items()}
    return obj


class TorchrunJob:
    """This process's place in the job: its rank, the TP group, and the control channel."""

    def __init__(self, timeout: float, device: str = "cpu") -> None:
        world_size = int(os.environ["WORLD_SIZE"])
        use_nccl = check_device(device) == "cuda"
        if use_nccl and torch.cuda.device_count() < world_size:
            raise ValueError(
                f"--device cuda: {world_size} ranks need {world_size} GPUs for NCCL (one rank per GPU), "
                f"this node has {torch.cuda.device_count()}; run fewer ranks, or --backend sim for any tp on one GPU"
            )
        self.backend = "nccl" if use_nccl else "gloo"
        if use_nccl:
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        self.device = torch.device("cuda", torch.cuda.current_device()) if use_nccl else torch.device("cpu")
        torch.set_num_threads(1)  # N ranks share the node's cores
        self.timeout = timeout
        dist.init_process_group(self.backend, timeout=datetime.timedelta(seconds=timeout))
        self.control = dist.new_group(backend="gloo") if use_nccl else None
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.runner = TaskRunner(TorchGroup())
        self._started: set[str] = set()
        self.lost = ""  # why the job can take no more tasks: a rank (or its node) went away mid-task

    @contextmanager
    def _channel(self) -> Iterator[None]:
        """The control channel's collectives: a gloo error there (a read error, a timeout) means a rank, or its
        node, went away; the job is lost from then on (:class:`RankLost`, now and for every later task)."""
        try:
            yield
        except RuntimeError as exc:
            detail = " ".join(str(exc).split())[:300]
            self.lost = (
                f"torchrun job of {self.world_size} ({self.backend}): a rank stopped answering the control channel, "
                f"its process or its node gone ({detail}); no later task can run on this job"
            )
            raise RankLost(self.lost) from None

    def _broadcast(self, obj: Any = None) -> Any:
        """Rank 0's ``obj`` on every rank."""
        data = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8) if self.rank == 0 else None
        size = torch.tensor([0 if data is None else data.numel()], dtype=torch.int64)
        with self._channel():
            dist.broadcast(size, src=0, group=self.control)
            buf = data if data is not None else torch.empty(int(size), dtype=torch.uint8)
            dist.broadcast(buf, src=0, group=self.control)
        return pickle.loads(_bytes(buf))

    def _gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order, on every rank."""
        data = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
        sizes = torch.empty(self.world_size, dtype=torch.int64)
        with self._channel():
            all_gather_flat(sizes, torch.tensor([data.numel()]), group=self.control)
            longest = int(sizes.max())
            padded = torch.zeros(longest, dtype=torch.uint8)
            padded[: data.numel()] = data
            out = torch.empty(self.world_size * longest, dtype=torch.uint8)
            all_gather_flat(out, padded, group=self.control)
        rows = out.view(self.world_size, longest)
        return [pickle.loads(_bytes(rows[r, : int(sizes[r])])) for r in range(self.world_size)]

    def _execute(self, spec: str, kwargs: dict[str, Any] | None) -> tuple:
        if kwargs is None:  # load and start only
            return self.runner.run(spec, None)
        reply = self.runner.run(spec, _to(kwargs, self.device))
        return ("ok", _to(reply[1], torch.device("cpu")), reply[2]) if reply[0] == "ok" else reply

    def run(self, spec: str, per_rank_kwargs: list[dict[str, Any]]) -> tuple[list[Any], list[Traffic]]:
        """On rank 0: run one task on every rank of the job.  A rank that went away (its process, or its node in a
        multi-node job) breaks the control channel: that task, and every later one at once, is :class:`RankLost`."""
        if len(per_rank_kwargs) != self.world_size:  # checked here: a short task would crash a serving rank
            raise ValueError(f"a task for {len(per_rank_kwargs)} ranks on a torchrun job of {self.world_size}")
        if self.lost:
            raise RankLost(self.lost)
        if spec not in self._started:  # start-up first (sharded.impls.Impl.start), as the pool does
            self._broadcast((spec, [None] * self.world_size))
            replies = dict(enumerate(self._gather(self._execute(spec, None))))
            started(spec, lambda: outcome(replies, self.world_size, "torchrun start-up", ""))
            self._started.add(spec)
        cpu = torch.device("cpu")  # pickled CUDA tensors would open every rank's GPU in every process
        per_rank_kwargs = [_to(kwargs, cpu) for kwargs in per_rank_kwargs]
        self._broadcast((spec, per_rank_kwargs))
        replies = self._gather(self._execute(spec, per_rank_kwargs[0]))
        group = f"torchrun {self.backend} group"
        return outcome(dict(enumerate(replies)), self.world_size, group, "", limit=self.timeout)

    def serve(self) -> int:
        """On ranks > 0: run tasks until rank 0 says stop; how many it ran."""
        served = 0
        while (task := self._broadcast()) is not None:
            spec, per_rank_kwargs = task
            self._gather(self._execute(spec, per_rank_kwargs[self.rank]))
            served += 1
        return served

    def stop(self) -> None:
        if not self.lost:  # a lost rank cannot be told; the survivors end on their collective timeout
            self._broadcast(None)
