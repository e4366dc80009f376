"""The classic path: gather every shard's logits, drop padding, scatter through d2t, argmax.

It reads padding from the real vocabulary size alone (padding always follows the
real ids), so it depends on nothing that ``sharded/`` computes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from reference.checks import InvalidInput, check_d2t, check_head, check_scale
from reference.logits import head_logits


def draft_logits(
    hidden: torch.Tensor,
    weight_shards: Sequence[torch.Tensor],
    bias_shards: Sequence[torch.Tensor | None] | None,
    *,
    vocab: int,
    scale: float = 1.0,
    soft_cap: float | None = None,
) -> torch.Tensor:
    """``[B, vocab]``: the shards' logits concatenated in rank order, padding dropped."""
    check_scale(scale, soft_cap)
    biases = bias_shards if bias_shards is not None else [None] * len(weight_shards)
    if len(biases) != len(weight_shards):
        raise InvalidInput(f"{len(weight_shards)} weight shards but {len(biases)} bias shards")
    for w, b in zip(weight_shards, biases, strict=True):
        check_head(hidden, w, b)
    padded = sum(w.shape[0] for w in weight_shards)
    if not 1 <= vocab <= padded:
        raise InvalidInput(f"vocab must be in [1, {padded}] (the shards' total rows), got {vocab}")
    full = torch.cat(
        [head_logits(hidden, w, b, scale, soft_cap) for w, b in zip(weight_shards, biases, strict=True)], dim=1
    )
    return full[:, :vocab]


def scatter_to_target(logits: torch.Tensor, d2t: torch.Tensor, target_vocab: int) -> torch.Tensor:
    """Place draft logit k at target ``k + d2t[k]`` in a ``-inf``-filled ``[B, target_vocab]``."""
    targets = check_d2t(d2t, logits.shape[1], target_vocab)
    full = logits.new_full((logits.shape[0], target_vocab), float("-inf"))
    full[:, targets] = logits
    return full


def classic_tokens(
    hidden: torch.Tensor,
    weight_shards: Sequence[torch.Tensor],
    bias_shards: Sequence[torch.Tensor | None] | None = None,
    *,
    vocab: int,
    scale: float = 1.0,
    soft_cap: float | None = None,
    d2t: torch.Tensor | None = None,
    target_vocab: int | None = None,
) -> torch.Tensor:
    """The oracle's int64 target ids ``[B]``."""
    logits = draft_logits(hidden, weight_shards, bias_shards, vocab=vocab, scale=scale, soft_cap=soft_cap)
    return tokens_from_draft_logits(logits, d2t, target_vocab)


def tokens_from_draft_logits(
    logits: torch.Tensor, d2t: torch.Tensor | None = None, target_vocab: int | None = None
) -> torch.Tensor:
    """The argmax over the draft vocabulary, or over the target one after the d2t scatter."""
    if d2t is None:
        return logits.argmax(dim=-1)
    if target_vocab is None:
        raise InvalidInput("target_vocab is required with d2t")
    return scatter_to_target(logits, d2t, target_vocab).argmax(dim=-1)
