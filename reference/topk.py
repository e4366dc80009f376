"""The classic top-k: the argmax rule extended to k tokens, with an order that does not depend on torch's tie handling.

A row's order: every NaN first (either sign bit, ascending column), then values descending, equal values
(``-0.0 == +0.0`` included) in ascending column.  ``torch.topk`` and ``torch.sort`` document no order
among equal values, nor how they treat NaN, so neither is given a NaN or trusted with a tie: values
become NaN-free float keys, and ties are settled by column explicitly.  Imports nothing from ``sharded/``.
"""

from __future__ import annotations

import math

import torch

from reference.checks import FLOAT_DTYPES, InvalidInput, check_d2t
from reference.oracle import scatter_to_target


def order_keys(logits: torch.Tensor) -> torch.Tensor:
    """Floats without NaN whose IEEE order is the top-k order of ``logits`` (column ties aside).

    IEEE comparison already ties ``-0.0`` with ``+0.0``; a NaN must rank above ``+inf``, which a wider
    float makes room for: NaN becomes ``+inf`` and ``+inf`` the wider type's largest finite value, above
    every finite value of the input's dtype.  Without a NaN the logits are their own keys.
    """
    if not bool(logits.isnan().any()):
        return logits
    wide = torch.float64 if logits.dtype == torch.float32 else torch.float32
    return logits.to(wide).nan_to_num_(nan=math.inf, posinf=torch.finfo(wide).max, neginf=-math.inf)


def check_k(k: int, vocab: int) -> None:
    """A top-k of k outside 1..vocab has no meaning; the message names k and the vocabulary."""
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise InvalidInput(f"k must be an int >= 1, got {k!r}")
    if k > vocab:
        raise InvalidInput(f"k={k} exceeds the logits vocabulary of {vocab} ids")


def top_k_ids(logits: torch.Tensor, k: int) -> torch.Tensor:
    """int64 ``[B, k]``: each row's top-k columns in the order of the module docstring.

    Why it is exact without trusting torch's ties: ``topk`` returns *some* k largest keys, so the k-th
    largest key ``kth`` is well defined and every key above it is among them; the top k are those plus
    the lowest columns with key ``kth`` (a ``topk`` over distinct column keys).  Last, the k columns are
    ordered by two stable sorts: by column, then by key descending.  Keys are floats without NaN, whose
    equal values (zeros made ``+0.0``) are bitwise equal, so no sort or topk has a NaN or a signed zero to
    handle in some undocumented way.
    """
    if not isinstance(logits, torch.Tensor) or logits.ndim != 2 or logits.dtype not in FLOAT_DTYPES:
        raise InvalidInput(
            "logits must be a 2-D float32, bfloat16 or float16 tensor, got "
            f"{getattr(logits, 'dtype', type(logits).__name__)} {tuple(getattr(logits, 'shape', ()))}"
        )
    check_k(k, logits.shape[1])
    keys = order_keys(logits)
    top, ids = keys.topk(k, dim=1)
    kth = top[:, -1:]
    above = top > kth
    columns = torch.arange(logits.shape[1], 0, -1, dtype=torch.int32, device=logits.device)  # larger: lower column
    tied = torch.where(keys == kth, columns, 0).topk(k, dim=1).indices  # the first k tied columns, ascending
    slots = torch.arange(k, device=logits.device)
    keep = torch.cat([above, slots < k - above.sum(1, keepdim=True)], dim=1)  # exactly k: k - above tied ones
    picked = torch.where(keep, torch.arange(2 * k, 0, -1, device=logits.device), 0).topk(k, dim=1).indices
    ids = torch.cat([ids, tied], dim=1).gather(1, picked).sort(dim=1, stable=True).values
    descending = keys.gather(1, ids).neg().add_(0.0)  # + 0.0: every zero has +0.0's bits, as ties must
    order = descending.sort(dim=1, stable=True).indices
    return ids.gather(1, order)


def classic_top_k(
    logits: torch.Tensor,
    k: int,
    d2t: torch.Tensor | None = None,
    target_vocab: int | None = None,
    *,
    mapped_only: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The classic path's top-k over full-vocabulary logits ``[B, L]``: ids int64 ``[B, k]`` and their values.

    With ``d2t`` it follows the classic path: the draft logits are scattered into a ``-inf``-filled target
    vocabulary and the top k are taken there, so equal values come in ascending *target* id (the local
    path's ascending draft id is the same order only for a strictly increasing table).  ``-inf`` slots then
    hold the lowest target ids, which may be targets no draft id maps to; ``mapped_only`` ranks the mapped
    targets alone, as a local path must (the named divergence of an all ``-inf`` row, extended to k).
    Values are gathered from the logits (same dtype and bits).
    """
    check_k(k, logits.shape[1])
    if d2t is None:
        ids = top_k_ids(logits, k)
        return ids, logits.gather(1, ids)
    if target_vocab is None:
        raise InvalidInput("target_vocab is required with d2t")
    full = scatter_to_target(logits, d2t, target_vocab)
    columns = torch.arange(target_vocab, device=logits.device)
    if mapped_only:
        columns = check_d2t(d2t, logits.shape[1], target_vocab).sort().values
        full = full[:, columns]
    ids = top_k_ids(full, k)
    return columns[ids], full.gather(1, ids)
