"""``tpargmax install-sglang``: the opt-in SGLang install, into the venv this command runs from.

Only two of SGLang's files run under test (its Triton kernels, which import torch and triton alone, loaded by file path
by ``engines.sglang.wheel.kernels``), so the wheel goes in without its dependencies: nothing else changes in the venv.
The last step checks that the installed wheel is 0.5.23 and holds both kernel files, and prints their paths; it imports
no ``sglang`` module.  The kernels still need Triton and a CUDA GPU (or Triton's CPU interpreter,
``TRITON_INTERPRET=1``) to run: the step says whether they are there, and fails only on the wheel.  About 39 MB.
"""

from __future__ import annotations

import argparse
import sys

from engines.versions import SGLANG_VERSION
from tpargmax import ROOT
from tpargmax.install.steps import run_steps

PIN = f"sglang=={SGLANG_VERSION}"

# Run by the venv's own interpreter after the install, so it sees the freshly installed wheel; it reuses the
# adapter's own lookup (the wheel's RECORD), so what it checks is what the subjects load.
CHECK = """\
import sys
from engines.sglang.wheel import kernels as sglang
paths = sglang.kernel_paths()
for name, rel in sglang.KERNEL_FILES.items():
    print(f"{rel}: {paths.get(name, 'MISSING')}")
reason = sglang.why_unavailable()
if reason in (None, sglang.TRITON_HINT, sglang.DEVICE_HINT):
    print("the SGLang subjects can run here" if reason is None else f"installed; to run the subjects: {reason}")
    sys.exit(0)
print(reason, file=sys.stderr)
sys.exit(1)
"""


def steps() -> list[list[str]]:
    """The commands, in order, for the interpreter running this one."""
    return [
        [sys.executable, "-m", "pip", "install", "--no-deps", PIN],
        [sys.executable, "-c", CHECK],
    ]


def install_sglang(args: argparse.Namespace) -> int:
    return run_steps("install-sglang", steps(), args.dry_run, "<check the two kernel files>", str(ROOT))
