"""Torch files written by someone else (repro side files, draft checkpoints): tensors are read, code never runs.

``torch.load(weights_only=True)`` unpickles tensors and plain containers only and
refuses every other object, so a file that smuggles a callable is refused
without running it.  What torch says then is a page of advice (including "load
it with weights_only=False", which is the one thing not to do); the callers
print one line, so the line that names what was refused is kept.
"""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path

import torch

ADVICE = ("Weights only load failed", "Please file an issue", "Check the documentation", "WeightsUnpickler error")


def load_weights_only(path: Path, mmap: bool = False) -> object:
    """The file's object, tensors on the CPU; a ``ValueError`` with a one-line reason if torch cannot or will not."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. pickle-protocol notices, which would break the one-line report
        try:
            try:
                return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
            except RuntimeError as exc:
                if not mmap or "mmap" not in str(exc):
                    raise
                return torch.load(path, map_location="cpu", weights_only=True)  # legacy (pre-zip) format: no mmap
        except pickle.UnpicklingError as exc:
            raise ValueError(f"refused by the weights-only loader, nothing in it ran: {_refused(exc)}") from None
        except Exception as exc:  # noqa: BLE001 - torch.load raises many types for a file that is not its own
            raise ValueError(f"{type(exc).__name__}: {first_line(exc)}") from None


def _refused(exc: BaseException) -> str:
    """What the weights-only unpickler refused, e.g. ``unsupported GLOBAL posix.system``."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    named = [line for line in lines if not line.startswith(ADVICE)]
    return (named or lines or [type(exc).__name__])[0].rstrip(".")


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
