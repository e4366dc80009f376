"""``tpargmax e2e``: vLLM's engine end to end, speculative decoding with ``use_local_argmax_reduction`` on and off.

It runs the end-to-end properties (``properties/test_e2e.py``) with pytest, ``--e2e``, in one process (an engine
holds 1 to 3 GiB), under the ``ci`` profile: derandomised, so every run draws the same examples.  A failure's repro
file goes to ``repro/vllm-VERSION/e2e/``, VERSION the installed build's; ``tpargmax repro`` replays it by starting
the engines again.  ``--self-test`` adds the project's proof that each property fails, for its own rule, with a
broken local path planted in every worker (``tests/test_e2e_power.py``).  Exit status: pytest's (no test collected
is 1); 2, with one line, where vLLM is not installed or its engine cannot run here (a build without vLLM's CPU
kernels: the CUDA wheel on a CPU).
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys

from engines.versions import installed_vllm, vllm_repro
from engines.vllm.e2e.engine import DTYPES
from engines.vllm.e2e.scenario import METHODS
from properties.harness.profiles import E2E_SHARE
from tpargmax import ROOT

QUICK = {"methods": "eagle3,draft_model_hetero", "dtypes": "float32", "examples": 2}  # a look in minutes


def command(args: argparse.Namespace) -> list[str]:
    """The pytest command line ``args`` ask for."""
    chosen = {"methods": ",".join(METHODS), "dtypes": ",".join(DTYPES), "examples": None}
    chosen |= QUICK if getattr(args, "quick", False) else {}
    chosen |= {k: getattr(args, k) for k in chosen if getattr(args, k, None) is not None}  # what is named wins
    args = argparse.Namespace(**{**vars(args), **chosen})
    cmd = [sys.executable, "-m", "pytest", "--e2e", "-p", "no:xdist", "--hypothesis-profile", args.profile]
    repro_dir = args.repro_dir or vllm_repro(installed_vllm() or "unknown")
    cmd += ["--repro-dir", repro_dir, "--e2e-methods", args.methods, "--e2e-dtypes", args.dtypes]
    if args.examples is not None:
        cmd += ["--max-examples", str(round(args.examples / E2E_SHARE))]
    cmd += ["properties/test_e2e.py", *(["tests/test_e2e_power.py"] if args.self_test else [])]
    extra = list(args.pytest_args)
    return cmd + (extra[1:] if extra[:1] == ["--"] else extra)


def e2e(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("vllm") is None:
        print("tpargmax e2e: needs vLLM in this environment: tpargmax install-vllm", file=sys.stderr)
        return 2
    from engines.vllm.wheel.shm import cpu_kernels_missing

    if (why := cpu_kernels_missing()) is not None:  # its engine runs its model on vLLM's CPU kernels
        print(f"tpargmax e2e: vLLM's engine cannot run here: {why}", file=sys.stderr)
        return 2
    cmd = command(args)
    print("$ " + " ".join(cmd), flush=True)
    status = subprocess.run(cmd, cwd=ROOT).returncode
    return 1 if status == 5 else status
