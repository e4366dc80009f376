"""The gloo rank pool: faults end in clear exceptions, and no rank process outlives its driver.

The pool's own timeout is what ends a hang here; the tests assert what it reports, never how fast.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from multiprocessing import Pipe

import pytest
import torch

from groups.pool import RankPool
from groups.simulated import RankTimeout
from groups.tasks import RemoteError, RemoteValueError, StartFailed
from groups.wire import recv, send
from properties.cases.case import Case
from properties.harness.runner import prepare, rank_kwargs
from tests import suite
from tests.forked_runs import popen
from tests.suite import ROOT, process_state

TIMEOUT = 3.0  # the pool's hang timeout: what a healthy task takes is milliseconds
# A hang is waited out in full, so a pool that is to hang waits less: still 70 times the slowest healthy task of
# kwargs_for() measured on two cores under six busy loops (28 ms), and its ranks' start (gloo's rendezvous, bounded by
# the rank's backstop: twice this, groups.rank_process) twice the slowest start measured there (1.9 s).
HANG_TIMEOUT = 2.0
GONE_WITHIN = 60.0  # closed or orphaned pool processes go within a second or two; this only bounds a regression


@pytest.fixture
def pool():
    p = RankPool(2, timeout=TIMEOUT)
    yield p
    p.close()


@pytest.fixture
def hanging_pool():
    """A pool whose task will hang: :data:`HANG_TIMEOUT`."""
    p = RankPool(2, timeout=HANG_TIMEOUT)
    yield p
    p.close()


def kwargs_for(tp: int = 2, **changes):
    inputs = prepare(Case(batch=3, hidden=4, vocab=200, tp=tp), "gloo")
    return [{**rank_kwargs(inputs, r), **changes} for r in range(tp)]


def gone(pids: list[int], within: float = GONE_WITHIN) -> bool:
    """True once none of ``pids`` is a live (non-zombie) process."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if all((state := process_state(pid)) is None or state[0] == "Z" for pid in pids):
            return True
        time.sleep(0.1)
    return False


def test_a_process_reaped_while_its_stat_is_read_counts_as_gone(monkeypatch):
    """The race a loaded run lost: ``stat`` opened while the process lived, read after it was reaped."""
    child = subprocess.Popen(["sleep", "60"])
    stat = open(f"/proc/{child.pid}/stat")  # noqa: SIM115 - handed to process_state, which closes it
    child.kill()
    child.wait()
    monkeypatch.setattr(suite, "open", lambda *_args, **_kwargs: stat, raising=False)
    assert suite.process_state(child.pid) is None


def test_tasks_reuse_the_same_processes(pool):
    pids = pool.pids
    for _ in range(20):
        outs, traffic = pool.run("packed_key", kwargs_for())
    assert pool.pids == pids and outs[0].tolist() == outs[1].tolist()
    assert dict(traffic[1].bytes) == {"all_reduce": 3 * 8}


def test_bad_input_on_every_rank_is_a_value_error_and_keeps_the_pool(pool):
    with pytest.raises(RemoteValueError, match=r"rank 0 of 2 raised InvalidInput: scale must be"):
        pool.run("vllm_pairs", kwargs_for(scale=-1.0))
    assert pool.alive
    pool.run("vllm_pairs", kwargs_for())


def test_a_task_for_another_number_of_ranks_is_refused_before_any_rank_sees_it(pool):
    with pytest.raises(ValueError, match="a task for 1 ranks on a pool of 2"):
        pool.run("vllm_pairs", kwargs_for()[:1])
    assert pool.alive
    pool.run("vllm_pairs", kwargs_for())  # the ranks are still in step


def test_a_raising_rank_comes_back_with_its_traceback(pool):
    pids = pool.pids
    with pytest.raises(RemoteError, match=r"rank 1 of 2 raised RuntimeError: rank 1 lost its shard") as info:
        pool.run("tests.broken:rank_one_raises", kwargs_for())
    assert "tests/broken.py" in "".join(info.value.__notes__)
    assert not pool.alive and gone(pids), "a pool whose ranks fell out of step must be closed"


def test_a_start_up_that_raises_on_the_ranks_is_no_verdict(pool):
    """A start-up that raises in the rank processes is :class:`StartFailed`: not an answer to the case (a
    BaseException no check reads), named with the rank's exception; every rank answered, so the pool goes on."""
    with pytest.raises(StartFailed, match="cannot start here: rank 0 of 2 raised RuntimeError: this build needs"):
        pool.run("tests.broken:start_refused", kwargs_for())
    assert pool.alive
    pool.run("vllm_pairs", kwargs_for())


@pytest.mark.parametrize(
    "name, words",
    [
        ("tests.broken:rank_one_sleeps", rf"rank 1 did not answer within {HANG_TIMEOUT}s \(hung\)"),
        ("tests.broken:rank_one_dies", r"rank 1 died \(SIGKILL\)"),
        (
            "tests.broken:last_rank_skips_the_exchange",
            rf"rank 0 did not answer within {HANG_TIMEOUT}s \(hung\); rank\(s\) \[1\] had answered",
        ),
    ],
)
def test_a_hung_or_dead_rank_is_named(hanging_pool, name, words):
    pids = hanging_pool.pids
    with pytest.raises(RankTimeout, match=words):
        hanging_pool.run(name, kwargs_for())
    assert not hanging_pool.alive and gone(pids)


DRIVER = """
import os, signal, sys, time
from groups.pool import RankPool
signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C semantics even if started with SIGINT ignored
pool = RankPool(2)
parents = {}
for entry in os.listdir("/proc"):
    try:
        with open(f"/proc/{entry}/stat") as fh:
            parents[int(entry)] = int(fh.read().rsplit(")", 1)[1].split()[1])
    except (ValueError, OSError):
        pass
family, grew = {os.getpid()}, True
while grew:  # every descendant: the fork server and the ranks it forked
    grew = bool(more := {pid for pid, ppid in parents.items() if ppid in family} - family)
    family |= more
family = " ".join(map(str, sorted(family - {os.getpid()})))
print(" ".join(map(str, pool.pids)), "|", family, "|", pool._dir, flush=True)
time.sleep(float(sys.argv[1]))
"""


@pytest.mark.parametrize("how", ["exit", "SIGINT", "SIGKILL"])
def test_no_rank_process_outlives_its_driver(how):
    driver = popen(
        [sys.executable, "-c", DRIVER, "0" if how == "exit" else "60"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    ranks, family, rendezvous = driver.stdout.readline().split("|")
    ranks, family, rendezvous = [int(p) for p in ranks.split()], [int(p) for p in family.split()], rendezvous.strip()
    assert len(ranks) == 2 and set(ranks) < set(family), (ranks, family)  # the fork server is family too
    if how != "exit":
        driver.send_signal(getattr(signal, how))
    driver.wait(GONE_WITHIN)
    assert gone(family), f"processes {family} survived their driver's {how}"  # zombies awaiting init count as gone
    if how == "SIGKILL":  # nothing of the driver's could clean up after it
        shutil.rmtree(rendezvous)
    assert not os.path.exists(rendezvous), f"the pool's rendezvous files {rendezvous} outlived it"


def test_tensors_cross_the_pipe_bit_for_bit_with_their_strides():
    """The pool's own tensor pickling keeps dtype, shape, strides, offset and every bit (NaN payloads, -0.0)."""
    base = torch.tensor([[float("nan"), -0.0, float("inf"), 1.5], [2.0, -3.0, 4.0, 5.0], [6.0, 7.0, 8.0, 9.0]])
    tensors = [base, base[:, 1:], base.t(), base[1:, ::2], base.bfloat16(), torch.tensor(3), torch.zeros(0, 4)]
    tensors += [torch.tensor([True, False]), torch.zeros(3).expand(2, 3), torch.ones(2, requires_grad=True)]
    here, there = Pipe()
    send(here, ("task", tensors))
    _, got = recv(there)
    for sent, came in zip(tensors, got, strict=True):
        assert (came.dtype, came.shape, came.stride(), came.storage_offset(), came.requires_grad) == (
            sent.dtype,
            sent.shape,
            sent.stride(),
            sent.storage_offset(),
            sent.requires_grad,
        )
        assert came.untyped_storage().data_ptr() != sent.untyped_storage().data_ptr() or not sent.numel()
        bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[sent.element_size()]
        assert torch.equal(came.detach().view(bits), sent.detach().view(bits))
