"""SGLang 0.5.23: ``lilicorr_topk_lse``'s Triton path returns ids outside the row for a row with fewer than k
logits above ``-inf``; its own torch path (``_topk_lse_torch``) does not.

``_tiled_scan`` and ``_tiled_select`` (``sglang/kernels/ops/speculative/lilicorr.py`` L23-93) load masked lanes
as ``other=neg`` with ``neg = -3.0e38``, a finite value that ranks *above* a real ``-inf`` logit.  So once the
finite logits are used up, ``_tiled_select`` picks lanes past the row's end (ids >= V) or the lane it already
picked (reset to ``neg``), and ``_combine_lse`` gives ``-3e38`` for an all ``-inf`` row, not NaN.  DFlash's
quantized-head branch (``srt/models/dflash.py`` L100-104) writes ``-inf`` into the shard's padded tail on
purpose before this top-k.

Standalone: needs torch, triton and the sglang 0.5.23 wheel (``pip install --no-deps sglang==0.5.23``), and a CUDA
device, or ``TRITON_INTERPRET=1`` (then the CPU tensor is handed over as one whose ``is_cuda`` is True, so the
function takes its kernel path).  ``import sglang`` needs SGLang's dependencies, so the file is executed without
its one SGLang import (``selector_walk_triton``, unused here).  Exit status 1 while the bug is there.

    TRITON_INTERPRET=1 python sglang_lilicorr_neg_inf_ids.py
"""

import ast
import importlib.util
import sys
import types
from pathlib import Path

import torch


def load_lilicorr() -> types.ModuleType:
    path = Path(importlib.util.find_spec("sglang").origin).parent / "kernels/ops/speculative/lilicorr.py"
    tree = ast.parse(path.read_text(), filename=str(path))
    tree.body = [n for n in tree.body if not (isinstance(n, ast.ImportFrom) and (n.module or "").startswith("sglang"))]
    module = types.ModuleType("lilicorr_from_wheel")
    module.__file__ = str(path)
    sys.modules[module.__name__] = module  # Triton's JIT looks a kernel's module up by name
    exec(compile(tree, str(path), "exec"), module.__dict__)
    return module


class OnCuda(torch.Tensor):
    """Under TRITON_INTERPRET=1: a CPU tensor that takes the function's CUDA (Triton) path."""

    @property
    def is_cuda(self):
        return True


def main() -> int:
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
