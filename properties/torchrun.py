"""Run the property suite with a torchrun job's ranks as the TP group.

    torchrun --standalone --nproc-per-node N -m properties.torchrun [PYTEST ARGS]

Rank 0 runs pytest (default: ``properties/``) with ``--backend torchrun``:
Hypothesis draws every example there, and each example is sent to all ranks,
which run the implementation under test on their own shard (gloo on the CPU;
NCCL with ``--device cuda``, one GPU per rank).  The exit status is pytest's.
"""

from __future__ import annotations

from sharded import quiet_numpy_notice

if __name__ == "__main__":  # a command line: hide torch's NumPy notice before torch is imported below
    quiet_numpy_notice()

import os
import sys

import pytest
import torch.distributed as dist

from groups.devices import default_device
from groups.torchrun import TorchrunJob
from properties.harness.settings import configure


def _option(args: list[str], name: str, default: str) -> str:
    """The value of option ``name`` among pytest's args (``--name V`` or ``--name=V``), else ``default``."""
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(f"{name}="):
            return arg.split("=", 1)[1]
    return default


def main(args: list[str]) -> int:
    try:
        job = TorchrunJob(
            timeout=float(_option(args, "--collective-timeout", "30")),
            device=_option(args, "--device", default_device()),
        )
    except ValueError as exc:  # every rank says the same; torchrun shows each rank's exit status
        print(f"properties.torchrun: {exc}", file=sys.stderr)
        return 4  # pytest's usage-error status
    code = 0
    try:
        if job.rank == 0:
            configure(torchrun_job=job)
            paths = [] if any(os.path.exists(a.split("::")[0]) for a in args) else ["properties"]
            code = int(pytest.main(["-p", "no:xdist", "--backend", "torchrun", *paths, *args]))
            job.stop()
        else:  # said on this rank's own output: its node's launcher may exit 1 once the driver's node has ended
            print(f"properties.torchrun: rank {job.rank} ran {job.serve()} tasks and stopped when told", flush=True)
    finally:
        dist.destroy_process_group()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
