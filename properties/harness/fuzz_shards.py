"""A fuzz campaign split over N workers (``tpargmax fuzz --shard I/N``): worker I's seeds, or its tests."""

from __future__ import annotations


def parse_shard(text: str) -> tuple[int, int]:
    """``I/N`` with 1 <= I <= N, as ``(I, N)``; a ValueError that says what was expected otherwise."""
    index, _, count = text.partition("/")
    try:
        i, n = int(index), int(count)
    except ValueError:
        raise ValueError(f"expected I/N such as 1/4, got {text!r}") from None
    if not 1 <= i <= n:
        raise ValueError(f"I/N needs 1 <= I <= N, got {text!r}")
    return i, n


def shard_seed(drawn: int, shard: tuple[int, int]) -> int:
    """A 32-bit round seed of worker I of N from a draw in ``[0, 2**32 // N)``: the seeds equal to I - 1 mod N."""
    i, n = shard
    return drawn * n + i - 1


def shard_of(test_ids: list[str], text: str) -> list[str]:
    """Worker I's share of the sorted ``test_ids``: every N-th from the I-th, so the parametrisations of one
    property (implementations, backends) spread over the workers."""
    i, n = parse_shard(text)
    return sorted(test_ids)[i - 1 :: n]
