"""SGLang 0.5.23: ``lilicorr_topk_lse``'s Triton path returns ids outside the row for a row with fewer than k
logits above ``-inf``; its own torch path (``_topk_lse_torch``) does not.

``_tiled_scan`` and ``_tiled_select`` (``sglang/kernels/ops/speculative/lilicorr.py`` L23-93) load masked lanes
as ``other=neg`` with ``neg = -3.0e38``, a finite value that ranks *above* a real ``-inf`` logit.  So once the
finite logits are used up, ``_tiled_select`` picks lanes past the row's end (ids >= V) or the lane it already
picked (reset to ``neg``), and ``_combine_lse`` gives ``-3e38`` for an all ``-inf`` row, not NaN.  DFlash's
quantized-head branch (``srt/models/dflash.py`` L100-104) writes ``-inf`` into the shard's padded tail on
purpose before this top-k.

Standalone: needs torch, triton and the sglang 0.5.23 wheel (``pip install --no-deps sglang==0.5.23``), and a CUDA
device, or ``TRITON_INTERPRET=1`` with NumPy (then the CPU tensor is handed over as one whose ``is_cuda`` is True,
so the function takes its kernel path).  ``import sglang`` needs SGLang's dependencies, so the file is executed
without its one SGLang import (``selector_walk_triton``, unused here).  Exit status 1 while the bug is there, 0 once
it is gone.  Exit 2, with one line saying what is missing, means it cannot be judged here: a package is not
installed, or there is neither a CUDA device nor ``TRITON_INTERPRET=1``.

    TRITON_INTERPRET=1 python sglang_lilicorr_neg_inf_ids.py
"""

from __future__ import annotations

import ast
import importlib.util
import os
import sys
import types
from pathlib import Path

try:
    import torch
except ImportError:  # checked by cannot_judge()
    torch = None

UNJUDGED = "S2: cannot be judged here: "  # exit 2, one line: what this machine lacks
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


def load_lilicorr() -> types.ModuleType:
    path = Path(importlib.util.find_spec("sglang").origin).parent / "kernels/ops/speculative/lilicorr.py"
    tree = ast.parse(path.read_text(), filename=str(path))
    tree.body = [n for n in tree.body if not (isinstance(n, ast.ImportFrom) and (n.module or "").startswith("sglang"))]
    module = types.ModuleType("lilicorr_from_wheel")
    module.__file__ = str(path)
    sys.modules[module.__name__] = module  # Triton's JIT looks a kernel's module up by name
    exec(compile(tree, str(path), "exec"), module.__dict__)
    return module


def on_cuda():
    """Under TRITON_INTERPRET=1: a CPU tensor's subclass that takes the function's CUDA (Triton) path."""

    class OnCuda(torch.Tensor):
        @property
        def is_cuda(self):
            return True

    return OnCuda


def main() -> int:
    if (why := cannot_judge()) is not None:
        print(UNJUDGED + why)
        return 2
    OnCuda = on_cuda()
    lilicorr = load_lilicorr()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    k, V = 4, 300
    logits = torch.full((2, V), float("-inf"), device=device)
    logits[0, 5] = 1.0  # row 0: one finite logit; row 1: every logit -inf
    vals, ids, lse = lilicorr.lilicorr_topk_lse(logits if device == "cuda" else logits.as_subclass(OnCuda), k)
    t_vals, t_ids, t_lse = lilicorr._topk_lse_torch(logits.as_subclass(torch.Tensor), k)
    print(f"Triton path: ids {ids.tolist()}, vals {vals.tolist()}, lse {lse.tolist()}")
    print(f"torch path:  ids {t_ids.tolist()}, vals {t_vals.tolist()}, lse {t_lse.tolist()}")
    bad = bool((ids >= V).any()) or any(len(set(r)) < len(r) for r in ids.tolist())
    if not bad:
        print("ok: every id lies in the row, none repeats")
        return 0
    print(f"BUG: ids >= V={V} or repeated: masked lanes load -3e38, which ranks above a -inf logit")
    return 1


if __name__ == "__main__":
    sys.exit(main())
