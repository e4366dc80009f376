"""What differs between ranks in a case: their copies of the hidden states, and the rows each rank owns.

Under TP a rank's hidden states come out of an all-reduce; a non-deterministic or one-sided reduction leaves the
ranks' copies a few ulps apart (spec section 13).  :func:`nudged` makes rank r's copy from the case's by moving
each finite, nonzero element up to ``ulps`` steps of its dtype, from a generator seeded by the case and the rank;
rank 0 keeps the case's own.  Under attention data parallel each rank owns a segment of the batch's rows
(:func:`dp_counts`): balanced, or cut at seeded points, empty segments included.
"""

from __future__ import annotations

import random

import torch

DP_RULES = ("none", "balanced", "skewed")
_BITS = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}


def nudged(hidden: torch.Tensor, seed: int, rank: int, ulps: int) -> torch.Tensor:
    """Rank ``rank``'s copy of ``hidden``: every finite nonzero element moved by at most ``ulps`` ulps (never across
    zero or to an infinity); rank 0's, or with ``ulps`` 0, the case's own."""
    if not rank or not ulps:
        return hidden
    g = torch.Generator(device="cpu").manual_seed((seed * 1_000_003 + rank) % 2**63)
    steps = torch.randint(-ulps, ulps + 1, hidden.shape, generator=g, device="cpu").to(hidden.device)
    bits = _BITS[hidden.dtype]
    moved = (hidden.view(bits).to(torch.int64) + steps).to(bits).view(hidden.dtype)
    keep = torch.isfinite(moved) & (torch.sign(moved) == torch.sign(hidden)) & torch.isfinite(hidden) & (hidden != 0)
    return torch.where(keep, moved, hidden)


def dp_counts(batch: int, tp: int, rule: str, seed: int) -> tuple[int, ...]:
    """Each rank's row count under attention data parallel (``rule`` from :data:`DP_RULES`, not ``none``)."""
    if rule == "balanced":
        return tuple(batch // tp + (r < batch % tp) for r in range(tp))
    cuts = sorted(random.Random(seed ^ 0x5EED).choices(range(batch + 1), k=tp - 1))
    return tuple(b - a for a, b in zip([0, *cuts], [*cuts, batch], strict=True))
