"""Where a case's tensors live: ``--device cpu|cuda`` (or ``TPARGMAX_DEVICE``), and which GPU each rank takes.

Rank r of a group runs on ``cuda:(r mod N)`` with N GPUs (all on ``cuda:0`` with one), as the simulated
group may run more ranks than the machine has GPUs; NCCL refuses two ranks on one GPU, so a torchrun job
on CUDA needs a GPU per rank.  Cases are built on the CPU (the same seed gives the same bits anywhere)
and moved; nothing here imports anything CUDA needs until a CUDA device is asked for.
"""

from __future__ import annotations

import os

import torch

DEVICE_ENV = "TPARGMAX_DEVICE"
DEVICES = ("cpu", "cuda")


def check_device(name: str) -> str:
    """``name`` if this machine can run cases there; else a ``ValueError`` in one line that says why not."""
    if name not in DEVICES:
        raise ValueError(f"--device: choose cpu or cuda, got {name!r}")
    if name == "cuda" and not torch.cuda.is_available():
        built = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
        raise ValueError(f"--device cuda: no CUDA device here (torch {torch.__version__}, {built}); use --device cpu")
    return name


def check_backend(backends: list[str] | tuple[str, ...], device: str) -> None:
    """gloo all-gathers CPU tensors only: naming it with a CUDA device is a ``ValueError`` in one line."""
    if device != "cpu" and "gloo" in backends:
        raise ValueError(
            f"--device {device} with --backend gloo: gloo cannot all-gather CUDA tensors; "
            "use --backend sim, or torchrun -m properties.torchrun (NCCL)"
        )


def default_device() -> str:
    """``TPARGMAX_DEVICE``, else ``cpu``."""
    return os.environ.get(DEVICE_ENV) or "cpu"


def rank_device(device: str, rank: int) -> torch.device:
    """The device rank ``rank`` runs on: ``cuda:(rank mod N)`` on CUDA; the CPU otherwise."""
    if device == "cpu":
        return torch.device("cpu")
    return torch.device("cuda", rank % torch.cuda.device_count())


def case_device(device: str) -> torch.device:
    """Where the oracle computes and judges: rank 0's device."""
    return rank_device(device, 0)
