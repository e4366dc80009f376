"""The logits formula both paths share: matmul and bias, then soft cap, then scale.

This is part of the contract: an implementation under test must compute each
shard's logits exactly like this (as vLLM's ``LogitsProcessor`` does), in the
head's dtype, so that the two paths differ only in how they reduce.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def head_logits(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    scale: float = 1.0,
    soft_cap: float | None = None,
) -> torch.Tensor:
    logits = F.linear(hidden, weight, bias)
    if soft_cap is not None:
        logits = torch.tanh(logits / soft_cap) * soft_cap
    if scale != 1.0:
        logits = logits * scale
    return logits
