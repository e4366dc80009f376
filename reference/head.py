"""A vocab-parallel head's rows: which global id each row of each rank holds.

vLLM's ``VocabParallelEmbedding`` pads the ``org`` base ids to a multiple of
``padding_size`` (``bp`` rows), then pads base plus ``added`` ids again
(``vp`` rows in all, ``ap = vp - bp`` of them for added ids), and splits the
base rows and the added rows over the ranks separately: rank r holds
``[base real | base padding | added real | added padding]``.  Only ids below the
logits vocabulary ``L`` are tokens.

The oracle derives every row's id here, row by row from these sizes, and never
from ``sharded/``'s range arithmetic, so that the two derivations check each other.
"""

from __future__ import annotations

import functools

import torch

from reference.checks import InvalidInput

DEFAULT_PADDING_SIZE = 64  # vLLM's DEFAULT_VOCAB_PADDING_SIZE
NOT_A_ROW = -1  # the id of a padding row


def padded_sizes(org: int, added: int, padding_size: int) -> tuple[int, int]:
    """``(bp, vp)``: the padded base rows and all padded rows."""
    base = -(-org // padding_size) * padding_size
    return base, -(-(base + added) // padding_size) * padding_size


def check_vocab(org: int, added: int, padding_size: int, logits_vocab: int, tp: int) -> tuple[int, int]:
    """Validate a head's sizes for ``tp`` ranks and return ``(bp, vp)``; a ValueError names the sizes."""
    for name, value, low in (
        ("org_vocab", org, 1),
        ("added_vocab", added, 0),
        ("padding_size", padding_size, 1),
        ("logits_vocab", logits_vocab, 1),
        ("tp", tp, 1),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise InvalidInput(f"{name} must be an int >= {low}, got {value!r}")
    if logits_vocab > org + added:
        raise InvalidInput(
            f"logits_vocab {logits_vocab} exceeds the head's {org + added} ids ({org} base + {added} added)"
        )
    base, total = padded_sizes(org, added, padding_size)
    if base % tp or (total - base) % tp:
        raise InvalidInput(
            f"tp={tp} cannot split this head: the {base} padded base rows (org_vocab {org} padded to a multiple "
            f"of {padding_size}) and the {total - base} padded added rows (added_vocab {added}) must each divide by tp"
        )
    return base, total


def row_ids(org: int, added: int, padding_size: int, tp: int) -> torch.Tensor:
    """``[tp, vp / tp]`` int64: the global id of each rank's rows, ``NOT_A_ROW`` for padding."""
    base, total = padded_sizes(org, added, padding_size)
    per_rank = total // tp
    rank = torch.arange(tp, device="cpu").unsqueeze(1)  # a head's ids are computed once, on the CPU, and cached
    row = torch.arange(per_rank, device="cpu").unsqueeze(0)
    base_rows, added_rows = base // tp, (total - base) // tp
    in_base = row < base_rows
    ids = torch.where(in_base, rank * base_rows + row, org + rank * added_rows + (row - base_rows))
    real = torch.where(in_base, ids < org, ids < org + added)
    return torch.where(real, ids, NOT_A_ROW)


@functools.lru_cache(maxsize=128)
def token_columns(org: int, added: int, padding_size: int, tp: int, logits_vocab: int) -> torch.Tensor:
    """For each token id ``0 .. logits_vocab - 1``, its column among all ranks' rows in rank order (cached: the
    suite asks for the same few heads thousands of times; callers must not modify the result)."""
    ids = row_ids(org, added, padding_size, tp).flatten()
    tokens = ((ids != NOT_A_ROW) & (ids < logits_vocab)).nonzero().flatten()
    columns = torch.empty(logits_vocab, dtype=torch.int64, device="cpu")  # moved to the logits' device by callers
    columns[ids[tokens]] = tokens
    return columns
