"""``tpargmax install-samplers``: the opt-in environment for the engines' samplers, into the venv this command
runs from.

The samplers under test are vLLM 0.32.0's Triton sampling code (its Gumbel kernel and DFlash2's candidate walk) and
SGLang 0.5.23's candidate top-k, so this is ``install-vllm`` (vLLM's CPU wheel with NumPy, pinned torch), then Triton
back in (``install-vllm`` removes it, and vLLM itself keeps disabling it on a CPU: the subjects load vLLM's Triton files
with the real Triton, ``engines.vllm.wheel.triton_files``), then SGLang's wheel without its dependencies, as
``install-sglang``.  The last step loads vLLM's Gumbel file under Triton's interpreter and says what can run. The
default install and test run never need any of it.
"""

from __future__ import annotations

import argparse
import sys

from tpargmax import ROOT
from tpargmax.install import sglang as install_sglang
from tpargmax.install import vllm as install_vllm
from tpargmax.install.steps import run_steps

TRITON = "triton==3.9.0"

CHECK = """\
import os, sys
os.environ.setdefault("TRITON_INTERPRET", "1")
from engines.vllm.wheel import triton_files
from engines.sglang.subjects import sampling as sglang_sampling
from sharded.triton_env import interpreting
triton_files.load(triton_files.GUMBEL)
print("vLLM's Gumbel file loads with Triton", "(interpreter)" if interpreting() else "")
reasons = [r for r in (triton_files.why_unavailable(), sglang_sampling.why_unavailable()) if r]
print("\\n".join(reasons) or "the samplers can run here: TRITON_INTERPRET=1 on a CPU")
sys.exit(1 if reasons else 0)
"""


def steps() -> list[list[str]]:
    """The commands, in order, for the interpreter running this one."""
    vllm = install_vllm.steps()
    return [
        *vllm[:2],
        [sys.executable, "-m", "pip", "install", TRITON],
        install_sglang.steps()[0],
        [sys.executable, "-c", CHECK],
    ]


def install_samplers(args: argparse.Namespace) -> int:
    check = "<load vLLM's Gumbel file, check SGLang's>"
    return run_steps("install-samplers", steps(), args.dry_run, check, str(ROOT))
