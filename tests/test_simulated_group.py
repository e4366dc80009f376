"""The simulated TP group: real exchange, byte counting, and faults named exactly instead of hangs.

Its ranks are greenlets on one host thread: a deadlock shows at once (``RankTimeout.limit`` is None: no timeout was
waited out), only a rank that runs outside any collective waits out the timeout, and no rank's task outlives its run.
"""

from __future__ import annotations

import threading

import greenlet
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
    # ranks 0 and 1 waited in the all_gather and were stopped before the run returned; rank 3 never started
    assert all_stopped.is_set() and sorted(stopped) == [0, 1]


@pytest.mark.parametrize("fault", ["raises", "returns early", "mismatched", "ends the process"])
def test_no_rank_task_outlives_its_run(fault):
    tasks: list[greenlet.greenlet] = []

    def rank_fn(group):
        tasks.append(greenlet.getcurrent())
        if group.rank == 1 and fault == "raises":
            raise ZeroDivisionError("boom on purpose")
        if group.rank == 1 and fault == "returns early":
            return None
        if group.rank == 1 and fault == "ends the process":
            raise SystemExit(0)
        group.all_gather(torch.ones(group.rank + 1 if fault == "mismatched" else 1))
        return group.all_gather(torch.ones(1))

    with pytest.raises(Exception):  # noqa: B017 - each fault's own exception is checked by the tests around
        run_simulated(rank_fn, 3, timeout=HANG_BOUND)
    assert len(tasks) >= 2 and all(task.dead for task in tasks)


def test_a_rank_that_skips_a_collective_is_named_at_once():
    def rank_fn(group):
        if group.rank == 1:
            return None
        return group.all_gather(torch.ones(1))

    match = r"rank\(s\) \[0, 2\] waited in all_gather, rank\(s\) \[1\] of 3 returned without joining it"
    with pytest.raises(RankTimeout, match=match) as info:
        run_simulated(rank_fn, 3, timeout=HANG_BOUND)
    assert info.value.limit is None  # a deadlock: named without waiting out the timeout


def test_a_deadlock_after_an_exchange_is_named_at_once():
    """Rank 0 goes on to a second collective that rank 1, done after the first, never joins."""

    def rank_fn(group):
        group.all_reduce(torch.ones(1))
        if group.rank == 0:
            group.all_reduce(torch.ones(1))
        return group.rank

    match = r"rank\(s\) \[0\] waited in all_reduce\(sum\), rank\(s\) \[1\] of 2 returned without joining it"
    with pytest.raises(RankTimeout, match=match) as info:
        run_simulated(rank_fn, 2, timeout=HANG_BOUND)
    assert info.value.limit is None


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


def test_a_rank_that_spins_without_a_collective_ends_at_the_timeout():
    """A greenlet cannot be interrupted: the caller's watchdog names the rank that holds the turn too long."""
    release = threading.Event()

    def rank_fn(group):
        group.all_gather(torch.ones(1))
        while group.rank == 0 and not release.is_set():  # spins in Python, never yields
            pass
        return group.all_gather(torch.ones(1))

    try:
        with pytest.raises(RankTimeout, match=r"rank 0 of 2 still running after 0.5s") as info:
            run_simulated(rank_fn, 2, timeout=0.5)
        assert info.value.limit == 0.5
    finally:
        release.set()
    # the host thread is left to the hung rank; the next run gets another one and is exact
    assert run_simulated(lambda group: int(group.all_reduce(torch.ones(1))), 2)[0] == [2, 2]


def test_mismatched_collectives_are_reported():
    def rank_fn(group):
        return group.all_gather(torch.ones(group.rank + 1))

    with pytest.raises(CollectiveError, match=r"mismatched collectives: rank 0: all_gather torch.float32 \(1,\)"):
        run_simulated(rank_fn, 2, timeout=HANG_BOUND)


def test_a_collective_from_another_thread_is_refused():
    def rank_fn(group):
        failed: list[BaseException] = []

        def call() -> None:
            try:
                group.all_gather(torch.ones(1))
            except BaseException as exc:  # noqa: BLE001 - examined below
                failed.append(exc)

        worker = threading.Thread(target=call)
        worker.start()
        worker.join(HANG_BOUND)
        raise failed[0]

    with pytest.raises(CollectiveError, match=r"rank 0: all_gather called outside its rank's task"):
        run_simulated(rank_fn, 2, timeout=HANG_BOUND)


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
