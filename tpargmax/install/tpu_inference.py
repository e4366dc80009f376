"""``tpargmax install-tpu-inference``: the opt-in environment for tpu-inference 0.32.0's sharded sampler, into the
venv this command runs from.

The sampler is JAX code (``tpu_inference/layers/jax/sample/sampling.py``) run on a mesh of simulated CPU devices
(``engines.tpu_inference.wheel.adapter``).  The wheel pins jax 0.11.2, libtpu, flax and torchax and imports vLLM; only
the sampler's own modules run, so it goes in without its dependencies, beside jax and jaxlib 0.10.2: the last pair that
installs on Python 3.11 (0.12 needs 3.12) and runs in one process with torch 2.13.0.  jax brings NumPy (and ml_dtypes,
opt_einsum, scipy): this environment only, never the suite's default one.  The last step loads the adapter and says what
can run.
"""

from __future__ import annotations

import argparse
import sys

from engines.versions import TPU_INFERENCE_VERSION as VERSION
from tpargmax import ROOT
from tpargmax.install.steps import run_steps

JAX = ("jax==0.10.2", "jaxlib==0.10.2")
PIN = f"tpu-inference=={VERSION}"

# Run by the venv's own interpreter after the install, so it sees the fresh packages; it asks the adapter itself,
# so what it checks is what the subjects load.
CHECK = """\
import sys
from engines.tpu_inference.wheel import adapter as tpu
reason = tpu.why_unavailable()
if reason is not None:
    print(reason, file=sys.stderr)
    sys.exit(1)
print(f"tpu-inference {tpu.VERSION}'s sampler runs here on {tpu.DEVICES} simulated CPU devices, "
      f"DISTRIBUTED_SAMPLING_MAX_TOP_K={tpu.MAX_TOP_K}: tpu_inference_classic and tpu_inference_distributed")
"""


def steps() -> list[list[str]]:
    """The commands, in order, for the interpreter running this one."""
    return [
        [sys.executable, "-m", "pip", "install", *JAX],
        [sys.executable, "-m", "pip", "install", "--no-deps", PIN],
        [sys.executable, "-c", CHECK],
    ]


def install_tpu_inference(args: argparse.Namespace) -> int:
    check = "<load the tpu-inference sampler on a CPU mesh>"
    return run_steps("install-tpu-inference", steps(), args.dry_run, check, str(ROOT))
