"""Run the property suite with a torchrun job's ranks as the TP group.

    torchrun --standalone --nproc-per-node N -m properties.torchrun [PYTEST ARGS]

Rank 0 runs pytest (default: ``properties/``) with ``--backend torchrun``:
Hypothesis draws every example there, and each example is sent to all ranks,
which run the implementation under test on their own shard (gloo on CPU, NCCL
when there are at least N CUDA devices).  The exit status is pytest's.
"""

from __future__ import annotations

from sharded import quiet_numpy_notice

if __name__ == "__main__":  # a command line: hide torch's NumPy notice before torch is imported below
    quiet_numpy_notice()

import os
import sys

import pytest
import torch.distributed as dist

from properties import runner
from sharded.torchrun import TorchrunJob


def _timeout(args: list[str]) -> float:
    """The value of ``--collective-timeout`` among pytest's args, else 30 s."""
    for i, arg in enumerate(args):
        if arg.startswith("--collective-timeout"):
            return float(arg.split("=", 1)[1] if "=" in arg else args[i + 1])
    return 30.0


def main(args: list[str]) -> int:
    job = TorchrunJob(timeout=_timeout(args))
    code = 0
    try:
        if job.rank == 0:
            runner.torchrun_job = job
            paths = [] if any(os.path.exists(a.split("::")[0]) for a in args) else ["properties"]
            code = int(pytest.main(["-p", "no:xdist", "--backend", "torchrun", *paths, *args]))
            job.stop()
        else:
            job.serve()
    finally:
        dist.destroy_process_group()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
