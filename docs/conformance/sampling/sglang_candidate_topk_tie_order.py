"""SGLang 0.5.23: ``candidate_topk``'s merge over ranks does not keep the first of tied candidates, so the first
candidate (DFlash2's greedy draft token) of a row whose maximum is tied across ranks depends on tp.

A maximum tied on ranks 0 and 1 at tp 4: ``torch.topk`` (CPU, torch 2.13) returns rank 1's.

``candidate_topk`` (``sglang/srt/models/dflash.py`` L107-154) takes each rank's local top-k
(``lilicorr_topk_lse`` or ``_radix_topk``), all-gathers values and global ids along the last dimension in rank
order, then ``torch.topk(gathered_vals, k, dim=-1)`` (L149).  ``torch.topk`` promises no order among equal
values: here it returns rank 1's tied maximum before rank 0's.  At tp 1 the same row's top-1 is the smallest id.

Standalone: needs torch and the sglang 0.5.23 wheel (``pip install --no-deps sglang==0.5.23``); triton for the
wheel file's imports.  The gather (``tensor_model_parallel_all_gather(t, dim=-1)``: every rank's ``t``
concatenated in rank order) is done in one process; lines L144-149 are restated below.  The local top-k is
``_topk_lse_torch`` (what ``lilicorr_topk_lse`` runs on CPU tensors).  Exit status 1 while tp 1 and tp 4 differ, 0
once they agree.  Exit 2, with one line saying what is missing, means it cannot be judged here: a package is not
installed (no device is needed).

    python sglang_candidate_topk_tie_order.py
"""

import ast
import importlib.util
import sys
import types
from pathlib import Path

try:
    import torch
except ImportError:  # checked by cannot_judge()
    torch = None

UNJUDGED = "S1: cannot be judged here: "  # exit 2, one line: what this machine lacks
NEEDS = {
    "torch": "torch",
    "sglang": "the sglang 0.5.23 wheel (pip install --no-deps sglang==0.5.23)",
    "triton": "triton (lilicorr.py imports it)",
}


def cannot_judge() -> str | None:
    """What this machine lacks to run the reproduction (exit 2), or None."""
    missing = [what for name, what in NEEDS.items() if importlib.util.find_spec(name) is None]
    return f"{', '.join(missing)} not installed" if missing else None


def load_lilicorr() -> types.ModuleType:
    path = Path(importlib.util.find_spec("sglang").origin).parent / "kernels/ops/speculative/lilicorr.py"
    tree = ast.parse(path.read_text(), filename=str(path))
    tree.body = [n for n in tree.body if not (isinstance(n, ast.ImportFrom) and (n.module or "").startswith("sglang"))]
    module = types.ModuleType("lilicorr_from_wheel")
    module.__file__ = str(path)
    sys.modules[module.__name__] = module
    exec(compile(tree, str(path), "exec"), module.__dict__)
    return module


def main() -> int:
    if (why := cannot_judge()) is not None:
        print(UNJUDGED + why)
        return 2
    lilicorr = load_lilicorr()
    k = 1
    tp = 4
    # maximum 7 at id 1 (rank 0) and id 2 (rank 1), smaller maxima on ranks 2 and 3
    row = torch.tensor([[0.0, 7.0, 7.0, 0.0, 2.0, 1.0, 0.0, 1.0]])
    _, tp1_ids, _ = lilicorr._topk_lse_torch(row, k)
    width = row.shape[1] // tp
    vals, ids = [], []
    for rank in range(tp):
        v, i, _ = lilicorr._topk_lse_torch(row[:, rank * width : (rank + 1) * width], k)
        vals.append(v.float())
        ids.append(i.long() + rank * width)  # L144: ids + org_vocab_start_index
    gathered_vals, gathered_ids = torch.cat(vals, dim=-1), torch.cat(ids, dim=-1)  # L145-146
    top_vals, sel = torch.topk(gathered_vals, k, dim=-1)  # L149
    tp2_ids = torch.gather(gathered_ids, -1, sel)
    print(f"tp 1: first candidate {tp1_ids.tolist()}")
    print(f"tp 4: gathered ids {gathered_ids.tolist()}, first candidate {tp2_ids.tolist()}")
    if torch.equal(tp1_ids, tp2_ids):
        print("ok: the same first candidate at tp 1 and tp 4")
        return 0
    print("BUG: torch.topk over the gathered values took a later rank's tied maximum")
    return 1


if __name__ == "__main__":
    sys.exit(main())
