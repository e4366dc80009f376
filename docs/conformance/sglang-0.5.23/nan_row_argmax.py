"""SGLang 0.5.23: ``softcap_row_argmax`` never returns a NaN logit; ``torch.argmax`` (its classic path) does.

Standalone: needs torch, triton and the sglang 0.5.23 wheel (``pip install --no-deps sglang==0.5.23``), and a
CUDA device.  Without one, ``TRITON_INTERPRET=1`` (with NumPy) runs the kernel on the CPU, with torch's ``tanh``
standing in for ``libdevice.tanh``, which Triton's interpreter lacks.  Exit status 1 while the two disagree, 0 once
they agree.  Exit 2, with one line saying what is missing, means it cannot be judged here: a package is not
installed, or there is neither a CUDA device nor ``TRITON_INTERPRET=1``.

    python nan_row_argmax.py                      # on a CUDA device
    TRITON_INTERPRET=1 python nan_row_argmax.py   # on a CPU
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

try:
    import torch
except ImportError:  # checked by cannot_judge()
    torch = None

SOFT_CAP = 30.0  # Gemma 2's final_logit_softcapping
UNJUDGED = "nan_row_argmax: cannot be judged here: "  # exit 2, one line: what this machine lacks
NEEDS = {
    "torch": "torch",
    "sglang": "the sglang 0.5.23 wheel (pip install --no-deps sglang==0.5.23)",
    "triton": "triton",
}


def cannot_judge() -> str | None:
    """What this machine lacks to run the kernel (exit 2), or None."""
    missing = [what for name, what in NEEDS.items() if importlib.util.find_spec(name) is None]
    if missing:
        return f"{', '.join(missing)} not installed"
    if os.environ.get("TRITON_INTERPRET") == "1":
        return None if importlib.util.find_spec("numpy") else "Triton's interpreter (TRITON_INTERPRET=1) needs NumPy"
    return None if torch.cuda.is_available() else "no CUDA device: run it with TRITON_INTERPRET=1 (on the CPU)"


def load_kernel():
    """``sglang/kernels/ops/sampling/softcap_row_argmax.py`` from the installed wheel, without importing sglang."""
    root = Path(importlib.util.find_spec("sglang").origin).parent
    spec = importlib.util.spec_from_file_location("row_argmax", root / "kernels/ops/sampling/softcap_row_argmax.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if os.environ.get("TRITON_INTERPRET") == "1":  # the interpreter has no libdevice
        import triton.language as tl
        from triton.runtime.interpreter import TensorHandle

        class Libdevice:
            @staticmethod
            def tanh(x):
                data = torch.tanh(torch.from_numpy(x.handle.data)).numpy()
                return tl.core.tensor(TensorHandle(data, x.handle.dtype.scalar), x.type)

        module.libdevice = Libdevice()
    return module.softcap_row_argmax


def main() -> int:
    if (why := cannot_judge()) is not None:
        print(UNJUDGED + why)
        return 2
    device = "cuda" if torch.cuda.is_available() else "cpu"
    # one row of one rank's shard: a NaN at column 1, the finite maximum at column 2
    logits = torch.tensor([[1.0, float("nan"), 3.0, -2.0]], device=device)
    classic = int(torch.argmax(torch.tanh(logits / SOFT_CAP) * SOFT_CAP, dim=-1)[0])
    value, index = load_kernel()(logits, SOFT_CAP, logits.shape[1], 0)[0].tolist()
    print(f"torch.argmax of the capped row (SGLang's classic path): {classic}")
    print(f"softcap_row_argmax (SGLang's deferred argmax, per rank): id {int(index)}, value {value}")
    if int(index) == classic:
        print("agree")
        return 0
    print("DISAGREE: the kernel keeps a block only if its max is > the best so far, which is false for NaN")
    return 1


if __name__ == "__main__":
    sys.exit(main())
