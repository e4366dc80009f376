"""Input validation shared by the oracle and the built-in implementations.

Every check raises :class:`InvalidInput` (a ``ValueError``) whose message names
the offending argument, so that a user who feeds bad input learns what is wrong
instead of getting a wrong token.
"""

from __future__ import annotations

import math

import torch

FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
FLOAT_ID_LIMIT = 2**24  # float32 carries every integer id exactly only below this


class InvalidInput(ValueError):
    """Bad input to the oracle or to a built-in implementation."""


def check_head(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    """Shapes and dtypes of the hidden states and of one head shard."""
    for name, t in (("hidden", hidden), ("weight", weight)):
        if not isinstance(t, torch.Tensor):
            raise InvalidInput(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.ndim != 2:
            raise InvalidInput(f"{name} must be 2-D, got shape {tuple(t.shape)}")
        if t.dtype not in FLOAT_DTYPES:
            raise InvalidInput(f"{name} dtype must be one of float32, bfloat16, float16, got {t.dtype}")
    if weight.dtype != hidden.dtype:
        raise InvalidInput(f"dtype mismatch: hidden is {hidden.dtype}, weight is {weight.dtype}")
    if weight.shape[1] != hidden.shape[1]:
        raise InvalidInput(
            f"shape mismatch: hidden is {tuple(hidden.shape)} but weight is {tuple(weight.shape)}; "
            "weight must be [shard_rows, hidden_size]"
        )
    if bias is not None:
        if not isinstance(bias, torch.Tensor) or bias.ndim != 1 or bias.shape[0] != weight.shape[0]:
            shape = tuple(bias.shape) if isinstance(bias, torch.Tensor) else type(bias).__name__
            raise InvalidInput(f"bias must be 1-D with {weight.shape[0]} entries (one per weight row), got {shape}")
        if bias.dtype != weight.dtype:
            raise InvalidInput(f"dtype mismatch: weight is {weight.dtype}, bias is {bias.dtype}")


def check_scale(scale: float, soft_cap: float | None) -> None:
    """A non-positive scale reverses or flattens the order; vLLM rejects it too."""
    if not isinstance(scale, (int, float)) or isinstance(scale, bool) or not math.isfinite(scale) or scale <= 0:
        raise InvalidInput(
            f"scale must be a finite number > 0, got {scale!r} "
            "(a negative scale reverses the logit order, zero makes every row a tie)"
        )
    if soft_cap is not None and (
        not isinstance(soft_cap, (int, float)) or not math.isfinite(soft_cap) or soft_cap <= 0
    ):
        raise InvalidInput(f"soft_cap must be None or a finite number > 0, got {soft_cap!r}")


def check_d2t(d2t: torch.Tensor, vocab: int, target_vocab: int | None = None) -> torch.Tensor:
    """Validate a draft-to-target offset table and return ``k + d2t[k]`` for every draft id k.

    Valid iff every target lies in ``[0, target_vocab)`` and no two draft ids share
    a target; otherwise the classic path's scatter is ill-defined.
    """
    if not isinstance(d2t, torch.Tensor) or d2t.ndim != 1:
        raise InvalidInput(f"d2t must be a 1-D tensor, got {getattr(d2t, 'shape', type(d2t).__name__)}")
    if d2t.dtype not in (torch.int64, torch.int32):
        raise InvalidInput(f"d2t must hold integer offsets (int64), got {d2t.dtype}")
    if d2t.shape[0] != vocab:
        raise InvalidInput(f"d2t has {d2t.shape[0]} entries but the draft vocabulary has {vocab} ids")
    targets = torch.arange(vocab, dtype=torch.int64, device=d2t.device) + d2t.to(torch.int64)
    bad = (targets < 0) if target_vocab is None else (targets < 0) | (targets >= target_vocab)
    if bool(bad.any()):
        ids = bad.nonzero().flatten()[:5].tolist()
        bound = "0" if target_vocab is None else f"[0, {target_vocab})"
        raise InvalidInput(
            f"d2t maps draft ids out of range {bound}: " + ", ".join(f"{k} -> {int(targets[k])}" for k in ids)
        )
    if bool((targets[1:] > targets[:-1]).all()):  # increasing, as most tables are: injective without a sort
        return targets
    ordered, order = torch.sort(targets, stable=True)
    dup = (ordered[1:] == ordered[:-1]).nonzero().flatten()
    if dup.numel():
        p = int(dup[0])
        i, j = sorted((int(order[p]), int(order[p + 1])))
        raise InvalidInput(f"d2t is not injective: draft ids {i} and {j} both map to target {int(ordered[p])}")
    return targets


def check_float_ids(padded_vocab: int) -> None:
    """Ids carried as float32 are exact only below 2**24."""
    if padded_vocab >= FLOAT_ID_LIMIT:
        raise InvalidInput(
            f"vocabulary of {padded_vocab} padded ids is too large for ids carried as float32: "
            f"they are exact only below 2**24 = {FLOAT_ID_LIMIT}"
        )
