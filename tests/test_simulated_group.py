"""The simulated TP group: real exchange, byte counting, and faults named exactly instead of hangs."""

from __future__ import annotations

import threading

import pytest
import torch

from groups.simulated import CollectiveError, RankTimeout, run_simulated

HANG_BOUND = 60.0  # seconds: only bounds a regression that would hang; the runs below take milliseconds


def test_all_gather_and_all_reduce_exchange_between_ranks():
    def rank_fn(group):
        mine = torch.tensor([group.rank, 10 * group.rank])
        return group.all_gather(mine), group.all_reduce(mine, op="max"), group.all_reduce(mine, op="sum")

    results, groups = run_simulated(rank_fn, 4)
    for gathered, biggest, total in results:
        assert gathered.tolist() == [[0, 0], [1, 10], [2, 20], [3, 30]]
        assert biggest.tolist() == [3, 30] and total.tolist() == [6, 60]
    assert dict(groups[0].traffic.calls) == {"all_gather": 1, "all_reduce": 2}


def test_a_failing_rank_is_reraised_and_its_peers_are_stopped():
    stopped: list[int] = []
    all_stopped = threading.Event()

    def rank_fn(group):
        if group.rank == 2:
            raise ZeroDivisionError("boom on purpose")
        try:
            return group.all_gather(torch.ones(1))
        except CollectiveError:
            stopped.append(group.rank)
            if len(stopped) == 2:
                all_stopped.set()
            raise

    with pytest.raises(ZeroDivisionError, match="boom") as info:
        run_simulated(rank_fn, 4, timeout=HANG_BOUND)
    assert "raised on rank 2 of 4" in "".join(info.value.__notes__)
    # ranks 0 and 1 waited in the all_gather and are told to stop; rank 3 never started
    assert all_stopped.wait(HANG_BOUND) and sorted(stopped) == [0, 1]


def test_a_rank_that_skips_a_collective_is_named_at_once():
    def rank_fn(group):
        if group.rank == 1:
            return None
        return group.all_gather(torch.ones(1))

    match = r"rank\(s\) \[0, 2\] waited in all_gather, rank\(s\) \[1\] of 3 returned without joining it"
    with pytest.raises(RankTimeout, match=match):
        run_simulated(rank_fn, 3, timeout=HANG_BOUND)


def test_a_hung_rank_is_named():
    release = threading.Event()

    def rank_fn(group):
        if group.rank == 1:
            release.wait(HANG_BOUND)  # hangs outside any collective until the test lets it go
        return group.rank

    try:
        with pytest.raises(RankTimeout, match=r"rank 1 of 2 still running after 0.5s, outside any collective \(hung\)"):
            run_simulated(rank_fn, 2, timeout=0.5)
    finally:
        release.set()


def test_mismatched_collectives_are_reported():
    def rank_fn(group):
        return group.all_gather(torch.ones(group.rank + 1))

    with pytest.raises(CollectiveError, match=r"mismatched collectives: rank 0: all_gather torch.float32 \(1,\)"):
        run_simulated(rank_fn, 2)


def test_a_run_is_deterministic_turn_by_turn():
    order: list[int] = []

    def rank_fn(group):
        order.append(group.rank)
        group.all_reduce(torch.zeros(1))
        order.append(group.rank)

    for _ in range(3):
        order.clear()
        run_simulated(rank_fn, 4)
        assert order == [0, 1, 2, 3, 0, 1, 2, 3]
