"""The simulated TP group: real exchange, byte counting, and failures instead of hangs."""

from __future__ import annotations

import time

import pytest
import torch

from sharded.simulated import CollectiveError, RankTimeout, run_simulated


def test_all_gather_and_all_reduce_exchange_between_ranks():
    def rank_fn(group):
        mine = torch.tensor([group.rank, 10 * group.rank])
        return group.all_gather(mine), group.all_reduce(mine, op="max"), group.all_reduce(mine, op="sum")

    results, _ = run_simulated(rank_fn, 4)
    for gathered, biggest, total in results:
        assert gathered.tolist() == [[0, 0], [1, 10], [2, 20], [3, 30]]
        assert biggest.tolist() == [3, 30] and total.tolist() == [6, 60]


def test_a_failing_rank_is_reraised_and_peers_do_not_hang():
    def rank_fn(group):
        if group.rank == 2:
            raise ZeroDivisionError("boom on purpose")
        return group.all_gather(torch.ones(1))

    start = time.monotonic()
    with pytest.raises(ZeroDivisionError, match="boom") as info:
        run_simulated(rank_fn, 4, timeout=30)
    assert time.monotonic() - start < 5, "peers waited for the timeout instead of being aborted"
    assert "raised on rank 2 of 4" in "".join(info.value.__notes__)


def test_a_rank_that_skips_a_collective_times_out_with_its_name():
    def rank_fn(group):
        if group.rank == 1:
            return None
        return group.all_gather(torch.ones(1))

    start = time.monotonic()
    match = r"timed out after 0.3s: rank\(s\) \[0, 2\] waited in it, rank\(s\) \[1\] of 3 never joined"
    with pytest.raises(RankTimeout, match=match):
        run_simulated(rank_fn, 3, timeout=0.3)
    assert time.monotonic() - start < 3


def test_a_hung_rank_is_named():
    def rank_fn(group):
        if group.rank == 1:
            time.sleep(1.5)
        return group.rank

    with pytest.raises(RankTimeout, match=r"rank\(s\) \[1\] of 2 still running after 0.6s"):
        run_simulated(rank_fn, 2, timeout=0.3)


def test_mismatched_collectives_are_reported():
    def rank_fn(group):
        return group.all_gather(torch.ones(group.rank + 1))

    with pytest.raises(CollectiveError, match=r"mismatched collectives: rank 0: all_gather torch.float32 \(1,\)"):
        run_simulated(rank_fn, 2, timeout=5)
