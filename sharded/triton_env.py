"""Triton here: whether its CPU interpreter is on, whether it imports, why a Triton subject cannot run, and the one
lock around Triton's module-wide state.

Every Triton user of the project asks this module: ``sharded.triton_key``, ``engines.sglang.wheel.kernels`` (and
SGLang's sampler), ``engines.vllm.wheel.triton_files`` (and the vLLM samplers).  Triton is optional: this module imports
without it.

:data:`TRITON_LOCK`: Triton's interpreter (``TRITON_INTERPRET=1``) patches ``triton.language`` module-wide while a
kernel runs, and the engines' loaders change module-wide state while a file executes (vLLM's swaps
``vllm.triton_utils`` in ``sys.modules``; the interpreter fix patches ``InterpreterBuilder``), so no two of these may
interleave: every kernel launch and every loader takes this one lock (on a GPU it also keeps first-call compilation
on one thread).  It is reentrant, so a launch that loads its kernels first, or a loader that loads another file,
cannot deadlock on itself.  The simulated group's ranks are greenlets on one host thread, switched only at
collectives, and no collective is called under the lock: a rank never switches away holding it (and since the
lock's owner is the thread, a plain ``Lock`` would hang that thread if one did, an ``RLock`` would not).  Ranks in
processes (the gloo pool, torchrun) each have their own lock, as they have their own Triton.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from functools import cache

import torch

TRITON_LOCK = threading.RLock()


def interpreting() -> bool:
    """Whether Triton's CPU interpreter is on (``TRITON_INTERPRET=1``), read from the environment at each call."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def on_kernel_device(t: torch.Tensor) -> torch.Tensor:
    """``t`` where a Triton kernel can read it: anywhere under the interpreter, else on CUDA (a compiled kernel
    refuses a CPU pointer)."""
    return t if interpreting() or t.device.type == "cuda" else t.cuda()


@cache
def triton_imports() -> bool:
    """Whether ``triton`` and ``triton.language`` import here (a broken install is as good as none)."""
    if importlib.util.find_spec("triton") is None:
        return False
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except Exception:  # noqa: BLE001 - a broken Triton is as good as none
        return False
    return True


def not_installed(subject: str, install: str | None = None, package: str = "Triton") -> str:
    """The reason where Triton (or the interpreter's NumPy) is missing: ``subject`` (what needs it) and ``install``
    (the command that installs it; default pip's)."""
    install = install or f"`.venv/bin/pip install {package.lower()}`"
    return f"{package} is not installed: {subject} cannot run without it ({install})"


def no_device(subject: str) -> str:
    """The reason where there is neither a CUDA GPU nor Triton's interpreter."""
    return f"{subject} cannot run without a CUDA GPU, or Triton's CPU interpreter (TRITON_INTERPRET=1)"


def why_unavailable(subject: str, install: str | None = None) -> str | None:
    """Why ``subject`` (e.g. ``"triton_key"``), which runs Triton kernels, cannot run here, or None: Triton does
    not import (:func:`not_installed`, naming ``install``), or there is no CUDA GPU and the interpreter is off
    (:func:`no_device`); under the interpreter, NumPy (which it runs kernels in) is not installed."""
    if not triton_imports():
        return not_installed(subject, install)
    if interpreting() and importlib.util.find_spec("numpy") is None:
        return not_installed(subject, install, "NumPy")
    if not (torch.cuda.is_available() or interpreting()):
        return no_device(subject)
    return None
