"""A vocab-parallel head's rows: which global id each row of each rank holds.

vLLM's ``VocabParallelEmbedding`` pads the ``org`` base ids to a multiple of
``padding_size`` (``bp`` rows), then pads base plus ``added`` ids again
(``vp`` rows in all, ``ap = vp - bp`` of them for added ids), and splits the
base rows and the added rows over the ranks separately: rank r holds
``[base real | base padding | added real | added padding]``.  Only ids below the
logits vocabulary ``L`` are tokens.

Other engines cut the columns unevenly (:data:`SHARD_RULES`, :func:`shard_widths`): rank r holds the
``widths[r]`` ids after its lower ranks', and the ids at or above the vocabulary are padding.

The oracle derives every row's id here, row by row from these sizes, and never
from ``sharded/``'s range arithmetic, so that the two derivations check each other.
"""

from __future__ import annotations

import functools
import random

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
    return _columns(row_ids(org, added, padding_size, tp).flatten(), logits_vocab)


@functools.lru_cache(maxsize=128)
def uneven_token_columns(widths: tuple[int, ...], org: int, logits_vocab: int) -> torch.Tensor:
    """:func:`token_columns` for a head cut into ``widths`` (cached likewise)."""
    return _columns(torch.cat(uneven_row_ids(widths, org)), logits_vocab)


def _columns(ids: torch.Tensor, logits_vocab: int) -> torch.Tensor:
    tokens = ((ids != NOT_A_ROW) & (ids < logits_vocab)).nonzero().flatten()
    columns = torch.empty(logits_vocab, dtype=torch.int64, device="cpu")  # moved to the logits' device by callers
    columns[ids[tokens]] = tokens
    return columns


# How a head's columns are cut into shards: ``even`` is vLLM's layout above; the others give each rank a width of
# its own.  ``split``: no padding, the first ``V % tp`` ranks one column more (``torch.tensor_split``, TensorRT-LLM's
# ``gather_output_sizes``: [501, 500]); ``pad64``: padded to a multiple of 64, then split so; ``pad64tp``: padded to
# a multiple of 64 * tp, every rank as wide (a gather that assumes ``V / tp`` columns misses the padding);
# ``skewed``: widths drawn from the head's seed, at least one column each.
SHARD_RULES = ("even", "split", "pad64", "pad64tp", "skewed")


def shard_widths(vocab: int, tp: int, rule: str, seed: int = 0) -> tuple[int, ...]:
    """Each rank's columns for ``vocab`` ids under an uneven ``rule`` (not ``even``); their sum covers ``vocab``."""
    if rule not in SHARD_RULES[1:]:
        raise InvalidInput(f"shard rule must be one of {SHARD_RULES[1:]}, got {rule!r}")
    if vocab < tp:
        raise InvalidInput(f"{vocab} ids cannot give each of {tp} ranks a column")
    if rule == "skewed":
        cuts = sorted(random.Random(seed).sample(range(1, vocab), tp - 1))
        return tuple(b - a for a, b in zip([0, *cuts], [*cuts, vocab], strict=True))
    total = {"split": vocab, "pad64": -(-vocab // 64) * 64, "pad64tp": -(-vocab // (64 * tp)) * 64 * tp}[rule]
    return tuple(total // tp + (r < total % tp) for r in range(tp))


def uneven_row_ids(widths: tuple[int, ...], vocab: int) -> list[torch.Tensor]:
    """Each rank's rows' global ids under ``widths``, ``NOT_A_ROW`` at and above ``vocab`` (padding)."""
    out, start = [], 0
    for width in widths:
        ids = torch.arange(start, start + width, device="cpu")
        out.append(torch.where(ids < vocab, ids, NOT_A_ROW))
        start += width
    return out
