"""vLLM's vocab-parallel head layout: which rows each TP rank holds, and which of them are tokens.

The ``org_vocab`` base ids are padded to a multiple of ``padding_size``; base
plus ``added_vocab`` added ids (LoRA or added tokens, global ids ``org_vocab``
onwards) are padded again.  The base rows and the added rows are split over the
ranks separately, so each rank holds ``[base real | base padding | added real |
added padding]``.  Only ids below ``vocab``, the logits vocabulary (vLLM's
``LogitsProcessor(..., org_vocab_size=L)``), are tokens.  Today's simple head
is ``vocab_parallel_layout(vocab, tp)``: no added ids, padding 64, every base id
a token.  Other engines cut the columns unevenly (``uneven_layout``): rank r holds ``widths[r]`` rows, the
ids after its lower ranks', and ids at or above the head's are padding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from reference.head import DEFAULT_PADDING_SIZE, check_vocab


@dataclass(frozen=True)
class ShardLayout:
    """One rank's rows: tokens ``start ..`` at rows ``[0, num_real)`` and ``added_start ..`` at
    rows ``[added_row, added_row + num_added)``; every other row is padding or an id at or above ``vocab``."""

    vocab: int  # the logits vocabulary: ids 0 .. vocab-1 are tokens
    padded_vocab: int  # rows over all ranks
    tp: int
    rank: int
    start: int  # global id of row 0
    num_real: int
    org_vocab: int
    added_vocab: int = 0
    padding_size: int = DEFAULT_PADDING_SIZE
    added_row: int = 0  # the first row of the added block (the base rows per rank)
    added_start: int = 0  # global id of row added_row
    num_added: int = 0
    widths: tuple[int, ...] = ()  # every rank's rows, where the shards are uneven; () for vLLM's even split

    @property
    def size(self) -> int:
        return self.widths[self.rank] if self.widths else self.padded_vocab // self.tp

    @property
    def num_padding(self) -> int:
        """Rows that are not tokens: padding, and ids at or above ``vocab``."""
        return self.size - self.num_real - self.num_added

    @property
    def base_real(self) -> int:
        """Rows ``[0, base_real)`` hold base ids (tokens or not); the rest of the base block is padding."""
        return max(0, min(self.added_row, self.org_vocab - self.start))

    @property
    def added_real(self) -> int:
        """Rows ``[added_row, added_row + added_real)`` hold added ids; the rest of the rank is padding."""
        return max(0, min(self.size - self.added_row, self.org_vocab + self.added_vocab - self.added_start))

    def token_rows(self, device: torch.device | str = "cpu") -> torch.Tensor:
        """The rows that are tokens, ascending (so are their global ids), on ``device`` (the logits')."""
        base = torch.arange(self.num_real, device=device)
        if not self.num_added:
            return base
        return torch.cat([base, torch.arange(self.num_added, device=device) + self.added_row])

    def token_ids(self, device: torch.device | str = "cpu") -> torch.Tensor:
        """The global ids of :meth:`token_rows`, on ``device``."""
        return torch.cat(
            [
                torch.arange(self.num_real, device=device) + self.start,
                torch.arange(self.num_added, device=device) + self.added_start,
            ]
        )

    def id_at(self, index: torch.Tensor) -> torch.Tensor:
        """The global ids at positions ``index`` of :meth:`token_ids`, without building it (a shard can hold
        130k tokens, a row's winner is one)."""
        return torch.where(index < self.num_real, index + self.start, index - self.num_real + self.added_start)

    def row_of(self, token: int) -> int | None:
        """The row holding global id ``token`` on this rank (padding and non-token rows included), or None."""
        if self.start <= token < self.start + self.base_real:
            return token - self.start
        if self.added_start <= token < self.added_start + self.added_real:
            return self.added_row + token - self.added_start
        return None


def vocab_parallel_layout(
    vocab: int,
    tp: int,
    *,
    added_vocab: int = 0,
    padding_size: int = DEFAULT_PADDING_SIZE,
    logits_vocab: int | None = None,
) -> tuple[ShardLayout, ...]:
    """One :class:`ShardLayout` per rank, in rank order, for ``vocab`` base ids (vLLM's ``org_num_embeddings``).

    ``logits_vocab`` defaults to every id, base and added.
    """
    logits = vocab + added_vocab if logits_vocab is None else logits_vocab
    base, total = check_vocab(vocab, added_vocab, padding_size, logits, tp)
    base_rows, added_rows = base // tp, (total - base) // tp
    layouts = []
    for rank in range(tp):
        start, added_start = rank * base_rows, vocab + rank * added_rows
        layouts.append(
            ShardLayout(
                vocab=logits,
                padded_vocab=total,
                tp=tp,
                rank=rank,
                start=start,
                num_real=max(0, min(base_rows, vocab - start, logits - start)),
                org_vocab=vocab,
                added_vocab=added_vocab,
                padding_size=padding_size,
                added_row=base_rows,
                added_start=added_start,
                num_added=max(0, min(added_rows, vocab + added_vocab - added_start, logits - added_start)),
            )
        )
    return tuple(layouts)


def uneven_layout(vocab: int, widths: tuple[int, ...], *, logits_vocab: int | None = None) -> tuple[ShardLayout, ...]:
    """One :class:`ShardLayout` per rank for ``vocab`` ids cut into ``widths`` columns (no added ids): rank r's rows
    are ids ``sum(widths[:r]) ..``, those at or above ``vocab`` padding, those at or above ``logits_vocab`` no token."""
    logits = vocab if logits_vocab is None else logits_vocab
    if len(widths) < 1 or min(widths) < 1 or sum(widths) < vocab or not 1 <= logits <= vocab:
        raise ValueError(f"widths {list(widths)} cannot cut {vocab} ids with logits vocabulary {logits}")
    layouts, start = [], 0
    for rank, width in enumerate(widths):
        real = max(0, min(width, logits - start))
        layouts.append(
            ShardLayout(
                vocab=logits,
                padded_vocab=sum(widths),
                tp=len(widths),
                rank=rank,
                start=start,
                num_real=real,
                org_vocab=vocab,
                padding_size=1,
                added_row=width,
                added_start=vocab,
                widths=tuple(widths),
            )
        )
        start += width
    return tuple(layouts)


def every_rank(layout: ShardLayout) -> tuple[ShardLayout, ...]:
    """The layouts of every rank of ``layout``'s head: what a rank needs to place what the others gathered."""
    if layout.widths:
        return uneven_layout(layout.org_vocab, layout.widths, logits_vocab=layout.vocab)
    return vocab_parallel_layout(
        layout.org_vocab,
        layout.tp,
        added_vocab=layout.added_vocab,
        padding_size=layout.padding_size,
        logits_vocab=layout.vocab,
    )
