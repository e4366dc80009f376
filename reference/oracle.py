"""The classic path: gather every shard's logits, order them by global id, keep the tokens, scatter, argmax.

It places each row by the global id ``reference.head.row_ids`` derives from the
head's sizes (through ``token_columns``), never by concatenating shards (with added ids, rank order is not
id order), so it depends on nothing that ``sharded/`` computes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from reference.checks import InvalidInput, check_d2t, check_head, check_scale
from reference.head import DEFAULT_PADDING_SIZE, check_vocab, token_columns, uneven_token_columns
from reference.logits import head_logits


def draft_logits(
    hidden: torch.Tensor | Sequence[torch.Tensor],
    weight_shards: Sequence[torch.Tensor],
    bias_shards: Sequence[torch.Tensor | None] | None,
    *,
    vocab: int,
    org_vocab: int | None = None,
    added_vocab: int = 0,
    padding_size: int = DEFAULT_PADDING_SIZE,
    scale: float = 1.0,
    soft_cap: float | None = None,
    widths: Sequence[int] | None = None,
) -> torch.Tensor:
    """``[B, vocab]``: the logits of token ids ``0 .. vocab - 1`` (the logits vocabulary), by global id.

    ``org_vocab`` (default ``vocab``) base ids and ``added_vocab`` added ids make the head; ids at or above
    ``vocab`` and every padding row are dropped.  ``widths``: the head cut unevenly, rank r holding the
    ``widths[r]`` ids after its lower ranks' (``reference.head.shard_widths``; no added ids).  ``hidden`` may be
    one tensor per rank, where the ranks' copies differ: each shard's logits are then its own rank's, as the
    classic path gathers them.
    """
    check_scale(scale, soft_cap)
    tp = len(weight_shards)
    org = vocab if org_vocab is None else org_vocab
    hiddens = list(hidden) if isinstance(hidden, (list, tuple)) else [hidden] * tp
    if len(hiddens) != tp:
        raise InvalidInput(f"{tp} weight shards but {len(hiddens)} ranks' hidden states")
    if widths is None:
        _, total = check_vocab(org, added_vocab, padding_size, vocab, max(tp, 1))
        rows = [total // tp] * tp
        columns = token_columns(org, added_vocab, padding_size, tp, vocab)
    else:
        rows = list(widths)
        if added_vocab or len(rows) != tp or sum(rows) < org or min(rows, default=0) < 1 or not 1 <= vocab <= org:
            raise InvalidInput(f"widths {rows} cannot cut a head of {org} ids (and no added ids) for tp={tp}")
        columns = uneven_token_columns(tuple(rows), org, vocab)
    biases = bias_shards if bias_shards is not None else [None] * tp
    if len(biases) != tp:
        raise InvalidInput(f"{tp} weight shards but {len(biases)} bias shards")
    for rank, (h, w, b) in enumerate(zip(hiddens, weight_shards, biases, strict=True)):
        check_head(h, w, b)
        if w.shape[0] != rows[rank]:
            raise InvalidInput(
                f"weight shard {rank} has {w.shape[0]} rows; a head of {org} base + {added_vocab} added ids padded "
                f"to multiples of {padding_size} has {sum(rows)} rows, {rows[rank]} on rank {rank} at tp={tp}"
            )
    # each shard on its own device (as its rank computes it), then together on the hidden states' device
    where = hiddens[0].device
    full = torch.cat(
        [
            head_logits(h.to(w.device), w, b, scale, soft_cap).to(where)
            for h, w, b in zip(hiddens, weight_shards, biases, strict=True)
        ],
        dim=1,
    )
    return full.index_select(1, columns.to(full.device))


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
    org_vocab: int | None = None,
    added_vocab: int = 0,
    padding_size: int = DEFAULT_PADDING_SIZE,
    scale: float = 1.0,
    soft_cap: float | None = None,
    d2t: torch.Tensor | None = None,
    target_vocab: int | None = None,
) -> torch.Tensor:
    """The oracle's int64 target ids ``[B]``; the head's sizes are as for :func:`draft_logits`."""
    logits = draft_logits(
        hidden,
        weight_shards,
        bias_shards,
        vocab=vocab,
        org_vocab=org_vocab,
        added_vocab=added_vocab,
        padding_size=padding_size,
        scale=scale,
        soft_cap=soft_cap,
    )
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


def tokens_over_shared_words(logits: torch.Tensor, draft_to_target: torch.Tensor, target_unk: int) -> torch.Tensor:
    """A draft with a vocabulary of its own (vLLM's ``use_heterogeneous_vocab``): the argmax over the draft words
    the target also holds (``draft_to_target`` not -1; the rest count as ``-inf``), mapped to the target's id; a
    pick outside them (a row with none above ``-inf``) goes to ``target_unk``."""
    if draft_to_target.shape != logits.shape[-1:]:
        raise InvalidInput(f"draft_to_target has {len(draft_to_target)} entries for {logits.shape[-1]} logits")
    shared = draft_to_target.to(logits.device) >= 0
    picked = logits.masked_fill(~shared, float("-inf")).argmax(dim=-1)
    targets = draft_to_target.to(logits.device)[picked]
    return torch.where(targets >= 0, targets, target_unk)
