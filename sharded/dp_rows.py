"""Attention data parallel beside a vocab-parallel head: each rank owns its own requests' rows.

Rank r holds the hidden states of rows ``[s_r, s_r + dp_rows[r])`` of the step's batch, rank order giving the
order (``dp_rows``: every rank's count, any of them 0).  The head is cut by vocabulary over the same ranks, so
every rank computes its shard's logits for every rank's rows: the rows are gathered first, the (value, id) pairs
reduced as usual, and each rank keeps its own rows' tokens.
"""

from __future__ import annotations

import torch

from reference.checks import InvalidInput
from sharded.group import TPGroup


def check_dp_rows(hidden: torch.Tensor, dp_rows: tuple[int, ...], group: TPGroup) -> None:
    """``dp_rows`` names one count per rank, this rank's the rows it holds."""
    ok = isinstance(dp_rows, (tuple, list)) and all(isinstance(n, int) and n >= 0 for n in dp_rows)
    if not ok or len(dp_rows) != group.world_size or dp_rows[group.rank] != hidden.shape[0]:
        raise InvalidInput(
            f"dp_rows must give each of the {group.world_size} ranks its row count (rank {group.rank} holds "
            f"{hidden.shape[0]} rows), got {dp_rows!r}"
        )


def gather_rows(hidden: torch.Tensor, dp_rows: tuple[int, ...], group: TPGroup) -> torch.Tensor:
    """Every rank's rows in rank order ``[sum(dp_rows), H]``: one all-gather, each rank padded to the most rows."""
    check_dp_rows(hidden, dp_rows, group)
    padded = hidden.new_zeros(max(dp_rows), hidden.shape[1])
    padded[: hidden.shape[0]] = hidden
    every = group.all_gather(padded)  # [tp, most, H]
    return torch.cat([every[rank, :count] for rank, count in enumerate(dp_rows)])


def through_every_row(fn, hidden: torch.Tensor, dp_rows: tuple[int, ...], group: TPGroup, *args, **kwargs):
    """``fn(every rank's rows, *args, group=group, **kwargs)``, and this rank's own rows of what it returns: a path of
    one batch on every rank, under attention data parallel."""
    tokens = fn(gather_rows(hidden, dp_rows, group), *args, group=group, **kwargs)
    return own_rows(tokens, dp_rows, group.rank)


def own_rows(tokens: torch.Tensor, dp_rows: tuple[int, ...], rank: int) -> torch.Tensor:
    """This rank's segment of the whole batch's ``tokens``."""
    start = sum(dp_rows[:rank])
    return tokens[start : start + dp_rows[rank]]
